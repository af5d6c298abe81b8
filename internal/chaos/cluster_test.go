package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// cluster is the run's own PostgreSQL: initdb'd into a temporary directory,
// listening on a free loopback port, so stopping it never disturbs another
// test's database. The postmaster is our child, run directly (no pg_ctl),
// with a parent-death signal: if the test process dies, so does it.
type cluster struct {
	bin     string
	dir     string // data directory
	logPath string
	port    int
	cred    *syscall.Credential // the postgres user when we run as root
	cmd     *exec.Cmd
	exited  chan struct{}
}

// pgBin finds the newest installed PostgreSQL server binaries.
func pgBin() string {
	if b := os.Getenv("PG_BIN"); b != "" {
		return b
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// freePort asks the kernel for a loopback port nobody listens on.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// postgresCredential is the postgres user's when we run as root (PostgreSQL
// refuses to run as root, as scripts/pg.sh says), else nil.
func postgresCredential(t testing.TB) *syscall.Credential {
	if os.Getuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("running as root without a postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// startCluster initdb's a cluster under root (a directory the postgres user
// can reach) and starts it; every process and file it makes is removed
// when the test ends, whatever its outcome.
func startCluster(t testing.TB, root string) *cluster {
	t.Helper()
	bin := pgBin()
	if bin == "" {
		t.Skip("PostgreSQL server binaries not found (apt-get install postgresql)")
	}
	c := &cluster{bin: bin, dir: filepath.Join(root, "pg"), logPath: filepath.Join(root, "postgres.log"),
		port: freePort(t), cred: postgresCredential(t)}
	sock := filepath.Join(root, "pgsock")
	for _, d := range []string{c.dir, sock} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if c.cred != nil {
			if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", c.dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 300
shared_buffers = 64MB
fsync = on
synchronous_commit = on
`, c.port, sock)
	f, err := os.OpenFile(filepath.Join(c.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(c.kill)
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// URL is the cluster's DATABASE_URL.
func (c *cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// start runs the postmaster and waits until it accepts connections (after
// an immediate stop that includes crash recovery).
func (c *cluster) start() error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	c.cmd, c.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(c.exited)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited at start; see %s", c.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not accepting connections after 60 s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// immediateStop is `pg_ctl stop -m immediate`: SIGQUIT to the postmaster,
// which ends every backend at once without a checkpoint; the next start
// recovers from the WAL, as after a crash.
func (c *cluster) immediateStop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
	c.cmd = nil
}

// kill ends the cluster for good (cleanup).
func (c *cluster) kill() {
	c.immediateStop()
}
