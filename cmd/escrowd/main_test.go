package main

import (
	"os"
	"testing"
)

// TestMain gives every serve a test runs a free metrics port unless the
// test chooses one: tests and the packages of other checkouts run at once,
// and the default address is one per machine.
func TestMain(m *testing.M) {
	if os.Getenv("ESCROW_METRICS_ADDR") == "" {
		os.Setenv("ESCROW_METRICS_ADDR", "127.0.0.1:0")
	}
	os.Exit(m.Run())
}
