// Package scripts holds the tests of the shell scripts beside them.
package scripts

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The tests below start clusters of their own, each in a copy of the
// script in a checkout of its own, on ports the script chooses free: the
// cluster everyone shares (and any other checkout's) is never touched, and
// every cluster started is deleted when the test ends.

func needPostgres(t *testing.T) {
	t.Helper()
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
		t.Skip("no PostgreSQL server binaries")
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("as root the script needs the postgres user")
		}
	}
}

// reachableTemp is a temporary directory the postgres user can enter (the
// Go test's own are mode 700), standing for the system's /tmp.
func reachableTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgsh-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type checkout struct {
	dir, tmp string
}

// newCheckout copies the script into dir/scripts, with the cluster deleted
// (pg.sh clean) when the test ends.
func newCheckout(t *testing.T, dir, tmp string) checkout {
	t.Helper()
	script, err := os.ReadFile("pg.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "pg.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	c := checkout{dir: dir, tmp: tmp}
	t.Cleanup(func() {
		if _, stderr, err := c.run("clean"); err != nil {
			t.Errorf("pg.sh clean in %s: %v\n%s", dir, err, stderr)
		}
	})
	return c
}

func (c checkout) run(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(filepath.Join(c.dir, "scripts", "pg.sh"), args...)
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "ESCROW_PG_PORT" && k != "PG_BIN" && k != "TMPDIR" {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "TMPDIR="+c.tmp)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return strings.TrimSpace(out.String()), errOut.String(), err
}

func (c checkout) start(t *testing.T) (dbURL, stderr string) {
	t.Helper()
	out, stderr, err := c.run("start")
	if err != nil {
		t.Fatalf("pg.sh start in %s: %v\n%s", c.dir, err, stderr)
	}
	return out, stderr
}

// dataDirectory is the data directory of the server at dbURL.
func dataDirectory(t *testing.T, dbURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", dbURL, err)
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func port(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// As root, a checkout under a mode-700 directory (as in /root) cannot hold
// the cluster: the postgres user cannot reach it. The cluster then lives
// in a folder named after the checkout under the temporary directory, the
// script says so once, and it works from there: start, url, stop, start
// again, and clean deletes it.
func TestClusterOfACheckoutUnderAClosedDirectory(t *testing.T) {
	needPostgres(t)
	if os.Geteuid() != 0 {
		t.Skip("only root's checkouts can be out of the postgres user's reach")
	}
	tmp := reachableTemp(t)
	home := t.TempDir()
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	c := newCheckout(t, filepath.Join(home, "shop"), tmp)

	dbURL, said := c.start(t)
	if !strings.Contains(said, "cannot reach") {
		t.Fatalf("the move was not explained: %q", said)
	}
	kept, err := os.ReadFile(filepath.Join(c.dir, ".data", "pg-dir"))
	if err != nil {
		t.Fatal(err)
	}
	where := strings.TrimSpace(string(kept))
	if filepath.Dir(where) != tmp || !strings.HasPrefix(filepath.Base(where), "escrowd-pg-shop-") || !strings.Contains(said, where) {
		t.Fatalf("cluster kept in %q (said %q), want a folder named after the checkout in %s", where, said, tmp)
	}
	if got := dataDirectory(t, dbURL); got != filepath.Join(where, "pg") {
		t.Fatalf("%s serves %s, want %s/pg", dbURL, got, where)
	}

	again, said := c.start(t)
	if again != dbURL || said != "" {
		t.Fatalf("second start: %s (said %q), want %s and silence", again, said, dbURL)
	}
	if u, _, err := c.run("url"); err != nil || u != dbURL {
		t.Fatalf("pg.sh url: %q %v, want %s", u, err, dbURL)
	}
	if _, stderr, err := c.run("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, stderr)
	}
	if again, said = c.start(t); again != dbURL || said != "" {
		t.Fatalf("start after stop: %s (said %q), want %s and silence", again, said, dbURL)
	}
	if _, stderr, err := c.run("clean"); err != nil {
		t.Fatalf("clean: %v %s", err, stderr)
	}
	if _, err := os.Stat(where); !os.IsNotExist(err) {
		t.Fatalf("clean left %s: %v", where, err)
	}
	if _, _, err := c.run("url"); err == nil {
		t.Fatal("pg.sh url printed a URL after clean")
	}

	// The temporary directory is shared: a link planted where the cluster
	// would go is refused, not followed (root would hand its target over
	// to postgres).
	target := t.TempDir()
	before, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, where); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(where)
	if _, stderr, err := c.run("start"); err == nil || !strings.Contains(stderr, "is a link") {
		t.Fatalf("start with a link at %s: %v %s", where, err, stderr)
	}
	after, err := os.Stat(target)
	if err != nil || after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Uid != before.Sys().(*syscall.Stat_t).Uid {
		t.Fatalf("the link's target changed: %v -> %v (%v)", before.Mode(), after.Mode(), err)
	}
}

// Two checkouts start their clusters at once: each gets a port of its own
// (neither is a port in use, such as the shared cluster's), each URL
// reaches its own checkout's cluster, and the port is kept across a stop.
// A port taken by another program while the cluster was stopped is
// replaced, and the script says so.
func TestTwoCheckoutsSideBySide(t *testing.T) {
	needPostgres(t)
	tmp := reachableTemp(t)
	parent := reachableTemp(t) // a checkout the postgres user can reach
	a := newCheckout(t, filepath.Join(parent, "a"), tmp)
	b := newCheckout(t, filepath.Join(parent, "b"), tmp)
	var urls [2]string
	var wg sync.WaitGroup
	for i, c := range []checkout{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, stderr, err := c.run("start")
			if err != nil {
				t.Errorf("pg.sh start in %s: %v\n%s", c.dir, err, stderr)
			}
			urls[i] = out
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if port(t, urls[0]) == port(t, urls[1]) {
		t.Fatalf("both checkouts on one port: %v", urls)
	}
	for i, c := range []checkout{a, b} {
		if got := dataDirectory(t, urls[i]); got != filepath.Join(c.dir, ".data", "pg") {
			t.Fatalf("%s serves %s, want the cluster of %s", urls[i], got, c.dir)
		}
		kept, err := os.ReadFile(filepath.Join(c.dir, ".data", "pg-port"))
		if err != nil || strings.TrimSpace(string(kept)) != port(t, urls[i]) {
			t.Fatalf("kept port %q (%v), URL %s", kept, err, urls[i])
		}
	}

	if _, stderr, err := a.run("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, stderr)
	}
	if again, _ := a.start(t); again != urls[0] {
		t.Fatalf("after a stop a started on %s, want its kept %s", again, urls[0])
	}
	if _, stderr, err := a.run("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, stderr)
	}
	squatter, err := net.Listen("tcp", "127.0.0.1:"+port(t, urls[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	moved, said := a.start(t)
	if port(t, moved) == port(t, urls[0]) || port(t, moved) == port(t, urls[1]) || !strings.Contains(said, "is taken") {
		t.Fatalf("with its port taken a started on %s (said %q); b is on %s", moved, said, urls[1])
	}
	if got := dataDirectory(t, moved); got != filepath.Join(a.dir, ".data", "pg") {
		t.Fatalf("%s serves %s", moved, got)
	}
	if u, _, err := a.run("url"); err != nil || u != moved {
		t.Fatalf("pg.sh url %q %v after the move to %s", u, err, moved)
	}

	// A cluster made before ./.data/pg-port existed (such as the one a
	// machine's checkouts already share) keeps the port its configuration
	// names.
	if _, stderr, err := a.run("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, stderr)
	}
	squatter.Close()
	if err := os.Remove(filepath.Join(a.dir, ".data", "pg-port")); err != nil {
		t.Fatal(err)
	}
	conf, err := os.OpenFile(filepath.Join(a.dir, ".data", "pg", "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	legacy := port(t, urls[0]) // free again
	if _, err := conf.WriteString("port = " + legacy + "\n"); err != nil {
		t.Fatal(err)
	}
	conf.Close()
	if u, _, err := a.run("url"); err != nil || port(t, u) != legacy {
		t.Fatalf("pg.sh url of a cluster without pg-port: %q %v, want port %s", u, err, legacy)
	}
	if again, said := a.start(t); port(t, again) != legacy || said != "" {
		t.Fatalf("a cluster without pg-port started on %s (said %q), want its configured port %s", again, said, legacy)
	}
}

// A cluster's port can be bound without anything listening on it (the
// local end of some connection): the port looks free, the server cannot
// bind it, and the script moves to the next free port and says so.
// Clusters are put below the kernel's ports for outgoing connections, so
// this is rare.
func TestPortBoundWithoutListener(t *testing.T) {
	needPostgres(t)
	tmp := reachableTemp(t)
	parent := reachableTemp(t)
	c := newCheckout(t, filepath.Join(parent, "shop"), tmp)
	first, _ := c.start(t)
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo int
		if _, err := fmt.Sscan(string(raw), &lo); err == nil && lo > 11000 {
			if p, _ := strconv.Atoi(port(t, first)); p >= lo || p < lo-10000 {
				t.Fatalf("cluster on %d, want below the outgoing ports (from %d)", p, lo)
			}
		}
	}
	if _, stderr, err := c.run("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, stderr)
	}
	p, _ := strconv.Atoi(port(t, first))
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	moved, said := c.start(t)
	if port(t, moved) == port(t, first) || !strings.Contains(said, "is bound by another program") {
		t.Fatalf("with its port bound the cluster started on %s (said %q), was %s", moved, said, first)
	}
	if got := dataDirectory(t, moved); got != filepath.Join(c.dir, ".data", "pg") {
		t.Fatalf("%s serves %s", moved, got)
	}
	if u, _, err := c.run("url"); err != nil || u != moved {
		t.Fatalf("pg.sh url %q %v after the move to %s", u, err, moved)
	}
}
