package main

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
)

// TestGoingLiveSimulatorBlockRuns: docs/going-live.md's commands for trying the
// Paystack rails locally are what the commands accept: the simulator's
// flags parse, and the variables give the test environment the Paystack
// provider at the simulator's address with its key.
func TestGoingLiveSimulatorBlockRuns(t *testing.T) {
	raw, err := os.ReadFile("../../docs/going-live.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "## Trying it without a Paystack account")
	if !ok {
		t.Fatal("docs/going-live.md has no section on trying the Paystack rails locally")
	}
	_, block, _ := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	var commands []string
	for _, l := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			commands = append(commands, l)
		}
	}
	if len(commands) != 2 {
		t.Fatalf("want the simulator and the server, got %q", commands)
	}
	sim := strings.Fields(strings.TrimSuffix(commands[0], "&"))
	if len(sim) < 2 || sim[0] != "./bin/escrowd" || sim[1] != "paystack-sim" {
		t.Fatalf("first command %q", commands[0])
	}
	fs := flag.NewFlagSet("paystack-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	paystackSimCommand.define(fs)
	if err := fs.Parse(sim[2:]); err != nil || fs.NArg() != 0 {
		t.Fatalf("the simulator's flags as printed: %v (left %q)", err, fs.Args())
	}
	serve := strings.Fields(commands[1])
	if serve[len(serve)-2] != "make" || serve[len(serve)-1] != "run" {
		t.Fatalf("second command %q", commands[1])
	}
	for _, kv := range serve[:len(serve)-2] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("not a variable: %q", kv)
		}
		t.Setenv(k, v)
	}
	t.Setenv("DATABASE_URL", "postgres://127.0.0.1:1/unused") // read, never dialled
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Providers[domain.Test]
	addr := fs.Lookup("addr").Value.String()
	if p.Name != "paystack" || p.BaseURL != "http://"+addr || string(p.SecretKey) != fs.Lookup("secret-key").Value.String() {
		t.Fatalf("test provider %+v, simulator at %s", p, addr)
	}
}
