package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/escrowd/escrowd/internal/keyring"
)

// The sandbox is what `make run` runs (`escrowd serve --demo`): a server
// for trying the API on one machine. It claims its address before
// anything else happens, so a second checkout started beside a running one
// is told at once that the port is taken, before any key is printed; then
// it starts the checkout's throwaway database when DATABASE_URL is unset,
// makes the throwaway setup a master key (ESCROW_MASTER_KEY_FILE) unless
// one is named, and relaxes two production defaults a trial would trip
// over.

// sandboxDefaults are the settings the sandbox changes unless they are set:
// no rate limit (a pasted session sends many requests within seconds),
// webhooks to receivers on this machine, logs for a terminal, metrics on
// a free port.
var sandboxDefaults = []struct{ name, value string }{
	{"ESCROW_RATE_LIMIT_PER_MINUTE", "0"},
	{"ESCROW_WEBHOOK_ALLOW_PRIVATE", "true"},
	{"ESCROW_LOG_FORMAT", "console"},
	// Any free port: a second checkout's sandbox must not find it taken.
	{"ESCROW_METRICS_ADDR", "127.0.0.1:0"},
}

// prepareServe claims serve's address (--addr, else ESCROW_ADDR, else
// :8080) before the database is opened, when the api role runs, and with
// --demo sets the sandbox up.
func prepareServe(fs *flag.FlagSet, inv *invocation) error {
	api := false
	for _, r := range strings.Split(fs.Lookup("role").Value.String(), ",") {
		api = api || strings.TrimSpace(r) == "api"
	}
	if !api {
		return nil
	}
	addr := fs.Lookup("addr").Value.String()
	if addr == "" {
		addr = getenv("ESCROW_ADDR", ":8080")
	}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	inv.listener = ln
	if fs.Lookup("demo").Value.String() != "true" {
		return nil
	}
	for _, d := range sandboxDefaults {
		if os.Getenv(d.name) == "" {
			os.Setenv(d.name, d.value)
		}
	}
	if os.Getenv("ESCROW_MASTER_KEY_FILE") == "" {
		// The throwaway setup's master key, kept beside its files.
		path := filepath.Join(getenv("ESCROW_DATA_DIR", "./.data"), "master.key")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			if err := keyring.CreateMasterFile(path); err != nil {
				return fmt.Errorf("creating the sandbox's master key: %w", err)
			}
		}
		os.Setenv("ESCROW_MASTER_KEY_FILE", path)
	}
	if os.Getenv("DATABASE_URL") == "" {
		url, err := startThrowawayDatabase()
		if err != nil {
			return err
		}
		os.Setenv("DATABASE_URL", url)
	}
	return nil
}

// listen claims addr, saying in words what to do when it is taken.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("the address %s is taken (another escrowd, perhaps make run in another checkout, "+
			"or another program); choose another with ESCROW_ADDR, for example: ESCROW_ADDR=%s make run", addr, nextAddr(addr))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s (ESCROW_ADDR): %w", addr, err)
	}
	return ln, nil
}

// nextAddr suggests the port after addr's, on the same host.
func nextAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	var n int
	if _, scanErr := fmt.Sscan(port, &n); err != nil || scanErr != nil || n <= 0 || n >= 65535 {
		return ":8081"
	}
	return net.JoinHostPort(host, fmt.Sprint(n+1))
}

// localURL is the base URL a client on this machine reaches the listener
// at: its real port, on localhost when it listens on every address.
func localURL(addr net.Addr) string {
	return "http://" + reachable(addr.String())
}

// reachable turns a listen address into one to connect to.
func reachable(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// startThrowawayDatabase starts the checkout's throwaway PostgreSQL
// (scripts/pg.sh, from the directory make runs in) and returns its URL.
func startThrowawayDatabase() (string, error) {
	if _, err := os.Stat("scripts/pg.sh"); err != nil {
		return "", fmt.Errorf("DATABASE_URL is not set, and there is no scripts/pg.sh here to start a throwaway database " +
			"(run make run in the checkout, or set DATABASE_URL)")
	}
	cmd := exec.Command("scripts/pg.sh", "start")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/pg.sh start: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
