package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestEventProgress(t *testing.T) {
	var out bytes.Buffer
	p := newEventProgress(&out, "rebuild ledger")
	p.finish(nil) // nothing drawn yet: nothing to finish
	if out.Len() != 0 {
		t.Fatalf("finish before any update wrote %q", out.String())
	}
	p.update(10, 100)
	p.update(100, 100) // not complete until finish: the log may grow
	if p.bar.IsFinished() || p.bar.GetMax64() != 100 {
		t.Fatalf("bar at total: finished %v, max %d", p.bar.IsFinished(), p.bar.GetMax64())
	}
	p.update(150, 200) // the log grew
	if p.bar.GetMax64() != 200 {
		t.Fatalf("max %d after the total grew to 200", p.bar.GetMax64())
	}
	p.finish(nil)
	if !p.bar.IsFinished() || !strings.Contains(out.String(), "rebuild ledger") || !strings.Contains(out.String(), "events") ||
		!strings.HasSuffix(out.String(), "\n") {
		t.Fatalf("finished bar: %v %q", p.bar.IsFinished(), out.String())
	}

	out.Reset()
	spin := newEventProgress(&out, "audit replay")
	spin.update(5, 0) // total unknown: a spinner, which counts
	if st := spin.bar.State(); st.CurrentNum != 5 {
		t.Fatalf("unknown total: at %d, want 5", st.CurrentNum)
	}
	spin.finish(errors.New("failed"))
	if spin.bar.IsFinished() {
		t.Fatal("a failed run's bar was completed")
	}
}
