package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/sealing"
)

// buildEscrowd builds the service binary once into dir.
func buildEscrowd(dir string) (string, error) {
	bin := filepath.Join(dir, "escrowd")
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, "../../cmd/escrowd") // no symbol tables: links faster
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// fleet is the escrowd processes of a run: instances serving the roles
// given at construction, each on its own loopback port, restarted by a
// supervisor whenever they exit (as systemd or Kubernetes would).
type fleet struct {
	t       testing.TB
	bin     string
	dir     string
	env     []string
	mu      sync.Mutex
	insts   []*instance
	stopped bool
	// exits counts exits the harness did not cause (an instance that gave
	// up, for example while the database was down), restarted all the same.
	exits int
	// publicURL, when set, is every instance's ESCROW_PUBLIC_URL (the
	// address of a load balancer in front of them); otherwise each has its
	// own address.
	publicURL string
}

type instance struct {
	name    string
	roles   string
	addr    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	killing bool
}

func newFleet(t testing.TB, bin, dir, dbURL string) *fleet {
	// One master key for every process of the fleet, as one deployment
	// has: they seal and open each other's events.
	master := filepath.Join(dir, "master.key")
	if err := keyring.CreateMasterFile(master); err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, bin: bin, dir: dir, env: []string{
		"ESCROW_MASTER_KEY_FILE=" + master,
		"DATABASE_URL=" + dbURL,
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"TMPDIR=" + dir,
		"ESCROW_RATE_LIMIT_PER_MINUTE=0",
		"ESCROW_WEBHOOK_ALLOW_PRIVATE=true",
		"ESCROW_DATA_DIR=" + filepath.Join(dir, "data"),
		"ESCROW_LOG_FORMAT=json",
		"ESCROW_METRICS_ADDR=127.0.0.1:0", // each process its own free port
	}}
	t.Cleanup(f.stopAll)
	return f
}

// cli runs one escrowd operator command and returns its standard output.
func (f *fleet) cli(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, args...)
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("escrowd %s: %v: %s%s", strings.Join(args, " "), err, out.Bytes(), notInfo(errb.String(), 20))
	}
	return out.Bytes(), nil
}

// add starts an instance serving roles.
func (f *fleet) add(roles string) *instance {
	f.t.Helper()
	i := &instance{name: fmt.Sprintf("escrowd-%d", len(f.insts)), roles: roles,
		addr: fmt.Sprintf("127.0.0.1:%d", freePort(f.t))}
	i.logPath = filepath.Join(f.dir, i.name+".log")
	f.mu.Lock()
	f.insts = append(f.insts, i)
	f.mu.Unlock()
	f.start(i)
	return i
}

func (f *fleet) start(i *instance) {
	logf, err := os.OpenFile(i.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		f.t.Errorf("%s: %v", i.name, err)
		return
	}
	defer logf.Close()
	cmd := exec.Command(f.bin, "serve", "--role", i.roles, "--addr", i.addr)
	public := f.publicURL
	if public == "" {
		public = "http://" + i.addr
	}
	cmd.Env = append(append([]string(nil), f.env...), "ESCROW_PUBLIC_URL="+public)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.t.Errorf("%s: %v", i.name, err)
		return
	}
	exited := make(chan struct{})
	f.mu.Lock()
	i.cmd, i.exited, i.killing = cmd, exited, false
	f.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
		f.mu.Lock()
		restart := !f.stopped && !i.killing && i.cmd == cmd
		if restart {
			f.exits++
		}
		f.mu.Unlock()
		if restart { // it gave up on its own: restart it after a pause
			time.Sleep(500 * time.Millisecond)
			f.mu.Lock()
			again := !f.stopped && i.cmd == cmd
			f.mu.Unlock()
			if again {
				f.start(i)
			}
		}
	}()
}

// kill9 is `kill -9` of the instance; it is started again after pause.
func (f *fleet) kill9(i *instance, pause time.Duration) {
	f.mu.Lock()
	cmd, exited := i.cmd, i.exited
	i.killing = true
	f.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	time.Sleep(pause)
	f.mu.Lock()
	stopped := f.stopped
	f.mu.Unlock()
	if !stopped {
		f.start(i)
	}
}

// waitReady waits until every instance answers /readyz with 200.
func (f *fleet) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	f.mu.Lock()
	insts := append([]*instance(nil), f.insts...)
	f.mu.Unlock()
	for _, i := range insts {
		if !strings.Contains(i.roles, "api") {
			continue
		}
		for {
			r, err := client.Get("http://" + i.addr + "/readyz")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after %s (last: %v)", i.name, timeout, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// apiAddrs are the addresses of the instances serving the API.
func (f *fleet) apiAddrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, i := range f.insts {
		if strings.Contains(i.roles, "api") {
			out = append(out, i.addr)
		}
	}
	return out
}

// stopAll kills every instance for good (cleanup, also on failure).
func (f *fleet) stopAll() {
	f.mu.Lock()
	f.stopped = true
	insts := append([]*instance(nil), f.insts...)
	f.mu.Unlock()
	for _, i := range insts {
		f.mu.Lock()
		cmd, exited := i.cmd, i.exited
		i.killing = true
		f.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
}

// logTails is the end of every instance's log, for a failed run.
func (f *fleet) logTails(lines int) string {
	var b strings.Builder
	for _, i := range f.insts {
		data, _ := os.ReadFile(i.logPath)
		fmt.Fprintf(&b, "--- %s (%s)\n%s", i.name, i.roles, notInfo(string(data), lines))
	}
	return b.String()
}

// notInfo is the last n lines of a JSON log above info level (the
// request log says nothing about a failure).
func notInfo(log string, n int) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if l != "" && !strings.Contains(l, `"level":"info"`) {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	if len(keep) == 0 {
		return ""
	}
	return strings.Join(keep, "\n") + "\n"
}

// sealer opens what the fleet's processes sealed in pool's database, with
// their master key.
func (f *fleet) sealer(pool *pgxpool.Pool) domain.Sealer {
	f.t.Helper()
	m, err := keyring.LoadMaster(filepath.Join(f.dir, "master.key"))
	if err != nil {
		f.t.Fatal(err)
	}
	return sealing.NewValues(keyring.New(pool, m))
}
