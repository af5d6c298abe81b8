package main

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
)

// runWithoutDatabase runs `escrowd args...` in a child process with no
// DATABASE_URL at all, as in a fresh second terminal.
func runWithoutDatabase(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return runEscrowdIn(t, env, args...)
}

// flagNames are the flags c defines.
func flagNames(c *command) []string {
	fs, _, _ := c.flagSet()
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// Every command and group answers --help, -h and `escrowd help ...` with
// its own usage on stdout, exit 0, and needs no database to do it.
func TestEveryCommandHasItsOwnHelp(t *testing.T) {
	overviewOut, stderr, code := runWithoutDatabase(t, "help")
	if code != 0 || stderr != "" || !strings.Contains(overviewOut, "escrowd help [COMMAND]") || !strings.Contains(overviewOut, "Exit codes:") {
		t.Fatalf("escrowd help: exit %d\n%s%s", code, overviewOut, stderr)
	}
	for _, c := range commands {
		if !strings.Contains(overviewOut, "  escrowd "+c.name) {
			t.Errorf("the overview lacks %q", c.name)
		}
	}
	for _, args := range [][]string{{}, {"--help"}, {"-h"}} {
		if out, stderr, code := runWithoutDatabase(t, args...); code != 0 || out != overviewOut || stderr != "" {
			t.Errorf("escrowd %v: exit %d, stderr %q, overview %v", args, code, stderr, out == overviewOut)
		}
	}
	for _, c := range commands {
		words := strings.Fields(c.name)
		want := "Usage: escrowd " + c.name
		var first string
		for _, args := range [][]string{append(words, "--help"), append(words, "-h"), append([]string{"help"}, words...)} {
			out, stderr, code := runWithoutDatabase(t, args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(out, want) {
				t.Errorf("escrowd %s: exit %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, stderr, out)
				continue
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("escrowd %s prints another usage:\n%s\n---\n%s", strings.Join(args, " "), out, first)
			}
			for _, f := range flagNames(c) {
				if !strings.Contains(out, "-"+f) {
					t.Errorf("escrowd %s does not list -%s:\n%s", strings.Join(args, " "), f, out)
				}
			}
		}
	}
	for group := range groups {
		for _, args := range [][]string{{group, "--help"}, {"help", group}} {
			out, stderr, code := runWithoutDatabase(t, args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(out, "escrowd "+group+":") {
				t.Errorf("escrowd %s: exit %d, stderr %q:\n%s", strings.Join(args, " "), code, stderr, out)
			}
		}
	}
	// Help after an argument is still help.
	if out, _, code := runWithoutDatabase(t, "projections", "rebuild", "ledger", "--help"); code != 0 || !strings.HasPrefix(out, "Usage: escrowd projections rebuild") {
		t.Errorf("rebuild ledger --help: exit %d\n%s", code, out)
	}
}

// The rebuild's usage names every read model it can rebuild, and says
// the webhook subscriber is not one.
func TestRebuildHelpListsTheReadModels(t *testing.T) {
	usage := projectionsRebuildCommand.usage()
	for _, p := range projections.All(nil) {
		if !strings.Contains(usage, p.Name()) {
			t.Errorf("rebuild usage lacks %s:\n%s", p.Name(), usage)
		}
	}
	if !strings.Contains(usage, "Never webhooks") {
		t.Errorf("rebuild usage does not warn off the webhook subscriber:\n%s", usage)
	}
}

// A mistake in a command line prints that command's usage (not the
// overview) on stderr and exits 2, before any database is needed.
func TestUsageErrorsPrintTheCommandsUsage(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		message string
		usage   string
	}{
		{[]string{"merchant", "create", "--no-such-flag"}, "flag provided but not defined: -no-such-flag", "Usage: escrowd merchant create"},
		{[]string{"merchant", "create"}, "merchant create: --name is required", "Usage: escrowd merchant create"},
		{[]string{"audit"}, "audit: --merchant is required", "Usage: escrowd audit"},
		{[]string{"key", "revoke", "--merchant", "m1"}, "key revoke: --key-id is required", "Usage: escrowd key revoke"},
		{[]string{"events", "export", "--merchant", ""}, "events export: --merchant is required", "Usage: escrowd events export"},
		{[]string{"projections", "status", "extra"}, "projections status: unexpected argument extra", "Usage: escrowd projections status"},
		{[]string{"projections", "rebuild", "a", "b"}, "projections rebuild: unexpected argument b", "Usage: escrowd projections rebuild"},
		{[]string{"serve", "--role"}, "flag needs an argument: -role", "Usage: escrowd serve"},
		{[]string{"webhooks", "listen", "--port", "x"}, `invalid value "x" for flag -port`, "Usage: escrowd webhooks listen"},
		{[]string{"merchant"}, "merchant: missing subcommand", "escrowd merchant:"},
		{[]string{"projections", "nope"}, "projections: unknown subcommand nope", "escrowd projections:"},
		{[]string{"nope"}, "unknown command nope", "escrowd help [COMMAND]"},
		{[]string{"help", "nope"}, "help: unknown command nope", "escrowd help [COMMAND]"},
	} {
		out, stderr, code := runWithoutDatabase(t, tc.args...)
		if code != 2 || out != "" || !strings.Contains(stderr, tc.message) || !strings.Contains(stderr, tc.usage) {
			t.Errorf("escrowd %s: exit %d, stdout %q, stderr:\n%s", strings.Join(tc.args, " "), code, out, stderr)
			continue
		}
		if tc.usage != "escrowd help [COMMAND]" && strings.Contains(stderr, "escrowd help [COMMAND]") {
			t.Errorf("escrowd %s printed the overview:\n%s", strings.Join(tc.args, " "), stderr)
		}
		if strings.Contains(stderr, "DATABASE_URL is not set") {
			t.Errorf("escrowd %s asked for a database:\n%s", strings.Join(tc.args, " "), stderr)
		}
	}
	// A command that does need the database says how to get one.
	_, stderr, code := runWithoutDatabase(t, "projections", "status")
	if code != 1 || !strings.Contains(stderr, "DATABASE_URL is not set") || !strings.Contains(stderr, "scripts/pg.sh url") {
		t.Fatalf("projections status without a database: exit %d\n%s", code, stderr)
	}
}

// A one-off command logs only warnings and errors: its output is the
// verdict alone. -v brings the info lines back.
func TestCommandsLogQuietlyUnlessVerbose(t *testing.T) {
	db := pgtest.NewURL(t)
	created := createMerchantProcess(t, db, "--name", "Quiet")
	out, stderr, code := runEscrowd(t, db, "audit", "--merchant", created.MerchantID)
	if code != 0 || stderr != "" || !strings.Contains(out, "clean:") {
		t.Fatalf("audit: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	out, stderr, code = runEscrowd(t, db, "projections", "rebuild", "merchants", "-v")
	if code != 0 || !strings.Contains(stderr, "rebuild started") || !strings.Contains(out, "rebuilt merchants") {
		t.Fatalf("rebuild -v: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

// serve logs the signal that stops it and that it stopped, and exits 0.
func TestServeLogsItsShutdown(t *testing.T) {
	db := pgtest.NewURL(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestEscrowdProcess$", "--", "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ESCROWD_TEST_PROCESS=1", "DATABASE_URL="+db, "ESCROW_DATA_DIR="+t.TempDir(), "ESCROW_LOG_FORMAT=json")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "serve listening", func() bool { return strings.Contains(stderr.String(), `"msg":"listening"`) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("serve still running 30 s after SIGTERM:\n%s", stderr.String())
	}
	logged := stderr.String()
	shutdown := strings.Index(logged, `"msg":"shutting down"`)
	stopped := strings.Index(logged, `"msg":"stopped"`)
	if shutdown < 0 || !strings.Contains(logged, "terminated") || stopped < shutdown {
		t.Fatalf("serve's log after SIGTERM:\n%s", logged)
	}
}

func TestStatusInWords(t *testing.T) {
	for _, tc := range []struct {
		row  statusRow
		want string
	}{
		{statusRow{ProjectorStatus: projections.ProjectorStatus{Lag: 0}, Installed: true}, "up to date"},
		{statusRow{ProjectorStatus: projections.ProjectorStatus{Lag: 1}, Installed: true}, "1 event behind"},
		{statusRow{ProjectorStatus: projections.ProjectorStatus{Lag: 865}, Installed: true}, "865 events behind"},
		{statusRow{ProjectorStatus: projections.ProjectorStatus{Lag: 865}, Kind: kindReadModel}, "865 events behind"},
		{statusRow{ProjectorStatus: projections.ProjectorStatus{Lag: 865}, Kind: kindSubscriber}, "not installed"},
	} {
		if got := behind(tc.row); got != tc.want {
			t.Errorf("behind(%+v) = %q, want %q", tc.row, got, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{
		200 * time.Millisecond: "just now", 4 * time.Second: "4s ago", 3*time.Minute + 5*time.Second: "3m ago",
		2 * time.Hour: "2h ago", 47 * time.Hour: "47h ago", 72 * time.Hour: "3d ago",
	} {
		if got := ago(d); got != want {
			t.Errorf("ago(%s) = %q, want %q", d, got, want)
		}
	}
}
