package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// standInBinary writes dir/bin/escrowd, a script that runs this test
// binary as escrowd, and returns its path.
func standInBinary(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bin", "escrowd")
	stand := fmt.Sprintf("#!/bin/sh\nESCROWD_TEST_PROCESS=1 exec %s -test.run='^TestEscrowdProcess$' -- \"$@\"\n", shellQuote(os.Args[0]))
	if err := os.WriteFile(path, []byte(stand), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMakeRunReportsATakenPort: `make run` beside a server that holds its
// port says so, and how to choose another, before printing anything else:
// no key, no log line, no stack trace, and no database started (the URL
// given is a closed port, never dialled).
func TestMakeRunReportsATakenPort(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	bin := standInBinary(t, t.TempDir())
	// -o build: the recipe runs the stand-in instead of building escrowd.
	cmd := exec.Command("make", "--no-print-directory", "-C", "../..", "-o", "build", "run", "BIN="+bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ESCROW_ADDR=" + addr,
		"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable", "ESCROW_DATA_DIR=" + t.TempDir()}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("make run succeeded on a taken port:\n%s%s", stdout.String(), stderr.String())
	}
	if stdout.String() != "" {
		t.Fatalf("make run printed before reporting the taken port:\n%s", stdout.String())
	}
	first, _, _ := strings.Cut(stderr.String(), "\n")
	want := "escrowd: the address " + addr + " is taken"
	if !strings.HasPrefix(first, want) || !strings.Contains(first, "ESCROW_ADDR=127.0.0.1:") {
		t.Fatalf("first line %q, want it to start with %q and suggest an ESCROW_ADDR", first, want)
	}
	for _, never := range []string{"sk_test_", "goroutine", ".go:", "INFO", "listening"} {
		if strings.Contains(stderr.String(), never) {
			t.Fatalf("make run's output on a taken port has %q:\n%s", never, stderr.String())
		}
	}
}

// TestServeDemoBlockWorksAsPasted: `serve --demo` (make run) on a port the
// kernel picks prints a block whose every URL carries the real port; the
// block, and the webhook commands printed after it, work as pasted into a
// second terminal in the checkout (a shell with nothing but PATH and HOME):
// SA, STD and API exported, the operator commands reach the database, the
// printed set-webhook is accepted; and the sandbox has no rate limit.
func TestServeDemoBlockWorksAsPasted(t *testing.T) {
	db := pgtest.NewURL(t)
	checkout := t.TempDir()
	standInBinary(t, checkout)
	serve := exec.Command(os.Args[0], "-test.run=^TestEscrowdProcess$", "--", "serve", "--demo")
	serve.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + checkout, "ESCROWD_TEST_PROCESS=1",
		"DATABASE_URL=" + db, "ESCROW_DATA_DIR=" + t.TempDir(), "ESCROW_ADDR=127.0.0.1:0"}
	var printed, logged syncBuffer
	serve.Stdout, serve.Stderr = &printed, &logged
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	waitUntil(t, "the demo block and the listener", func() bool {
		return strings.Contains(printed.String(), "Hosted checkout") && strings.Contains(logged.String(), "listening")
	})
	out := printed.String()
	api := regexp.MustCompile(`(?m)^  export API=(http://127\.0\.0\.1:(\d+))$`).FindStringSubmatch(out)
	if api == nil || api[2] == "0" || api[2] == "8080" {
		t.Fatalf("no API built from the claimed port:\n%s", out)
	}
	for _, u := range regexp.MustCompile(`https?://(localhost|127\.0\.0\.1):\d+`).FindAllString(out, -1) {
		if u != api[1] && u != "http://127.0.0.1:9000" {
			t.Fatalf("a printed URL %s is not the server's %s:\n%s", u, api[1], out)
		}
	}
	if !strings.Contains(out, "/checkout/cs_") || !strings.Contains(out, "any number of requests") {
		t.Fatalf("no checkout link, or the rate limit is on:\n%s", out)
	}

	// The block, then the webhook commands, as the user pastes them.
	var block []string
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "To try it, paste into a second terminal") {
			for _, b := range lines[i+2:] {
				if strings.TrimSpace(b) == "" {
					break
				}
				block = append(block, strings.TrimPrefix(b, "  "))
			}
		}
	}
	for _, v := range []string{"DATABASE_URL", "SA", "STD", "API"} {
		if !strings.Contains(strings.Join(block, "\n"), "export "+v+"=") {
			t.Fatalf("the block does not export %s:\n%s", v, out)
		}
	}
	hook := regexp.MustCompile(`(?s)  (curl -s -X PUT "\$API/v1/merchant/webhook".*?'\{"url":"http://127.0.0.1:9000/"\}')\n`).FindStringSubmatch(out)
	set := regexp.MustCompile(`\(or: (\./bin/escrowd merchant set-webhook [^)]*)\)`).FindStringSubmatch(out)
	deliveries := regexp.MustCompile(`Deliveries and retries: (curl .*)`).FindStringSubmatch(out)
	if hook == nil || set == nil || deliveries == nil {
		t.Fatalf("no webhook commands:\n%s", out)
	}
	script := strings.Join(append(block, "echo", hook[1], "echo", set[1], deliveries[1]), "\n")
	sh := exec.Command("bash", "-e", "-c", script)
	sh.Dir = checkout
	sh.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + checkout}
	pasted, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the pasted commands failed: %v\n%s\n---\n%s", err, script, pasted)
	}
	for _, want := range []string{`"message":"Customers fetched successfully"`, "up to date",
		`"message":"Webhook updated successfully"`, `"message":"Webhook deliveries fetched successfully"`} {
		if !strings.Contains(string(pasted), want) {
			t.Fatalf("the pasted commands' output lacks %q:\n%s", want, pasted)
		}
	}
}
