package domaintest

import (
	"fmt"
	"testing"

	"github.com/escrowd/escrowd/domain"
)

type (
	one struct{ N int }
	two struct{ S string }
	// lossy drops its field on the way through JSON.
	lossy struct{ hidden int }
)

func (one) EventType() string   { return "t.one" }
func (two) EventType() string   { return "t.two" }
func (lossy) EventType() string { return "t.lossy" }

// recorder is a testing.TB whose Fatalf stops the check and records why.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func check(t *testing.T, reg domain.Registry, evs ...domain.Event) (failed string) {
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	RoundTrip(r, reg, evs...)
	return ""
}

func TestRoundTrip(t *testing.T) {
	reg := domain.NewRegistry(func() domain.Event { return &one{} }, func() domain.Event { return &two{} })
	if f := check(t, reg, one{N: 1}, two{S: "x"}); f != "" {
		t.Fatalf("a faithful registry failed: %s", f)
	}
	if f := check(t, reg, one{N: 1}); f == "" {
		t.Fatal("a registered type left out passed")
	}
	bad := domain.NewRegistry(func() domain.Event { return &lossy{} })
	if f := check(t, bad, lossy{hidden: 3}); f == "" {
		t.Fatal("an event that does not survive JSON passed")
	}
}
