package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/escrowd/escrowd/internal/keyring"
)

// TestMain gives every serve a test runs a free metrics port unless the
// test chooses one: tests and the packages of other checkouts run at once,
// and the default address is one per machine. Every command gets a master
// key (ESCROW_MASTER_KEY_FILE) unless the test names one: the commands
// seal personal fields with the data keys it wraps.
func TestMain(m *testing.M) {
	if os.Getenv("ESCROW_METRICS_ADDR") == "" {
		os.Setenv("ESCROW_METRICS_ADDR", "127.0.0.1:0")
	}
	if os.Getenv("ESCROW_MASTER_KEY_FILE") == "" {
		dir, err := os.MkdirTemp("", "escrowd-master")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		path := filepath.Join(dir, "master.key")
		if err := keyring.CreateMasterFile(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("ESCROW_MASTER_KEY_FILE", path)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}
