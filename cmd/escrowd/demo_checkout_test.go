package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"testing"

	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// `escrowd demo` (what make run prints) gives a checkout link a new user
// can open and pay at once: an open session of a demo escrow whose buyer's
// test wallet covers it, the same link on the next run, a new one once
// that session is no longer open.
func TestDemoPrintsAPayableCheckoutLink(t *testing.T) {
	db := pgtest.NewURL(t)
	t.Setenv("DATABASE_URL", db)
	t.Setenv("ESCROW_DATA_DIR", t.TempDir())
	t.Setenv("ESCROW_PUBLIC_URL", "http://localhost:8080")
	linkOf := regexp.MustCompile(`(?m)^  http://localhost:8080/checkout/(cs_[A-Z2-7]{26})$`)
	demo := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"demo"}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		m := linkOf.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("demo output has no checkout link:\n%s", out.String())
		}
		return m[1]
	}
	first := demo()
	svc := service(testEnv(t, db))
	ctx := context.Background()
	v, err := svc.CheckoutPage(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if v.Session.StatusAt(svc.Engine.Now()) != checkout.Open || v.Shortfall != 0 || v.Escrow.Due() != 10_250_00 {
		t.Fatalf("demo session %+v, shortfall %s, due %s", v.Session, v.Shortfall, v.Escrow.Due())
	}
	if again := demo(); again != first {
		t.Fatalf("second run shows %s, first %s", again, first)
	}
	if _, err := svc.PayCheckout(ctx, first, v.Escrow.Due()); err != nil {
		t.Fatal(err)
	}
	next := demo()
	if next == first {
		t.Fatal("a paid demo session is shown again")
	}
	if v, err := svc.CheckoutPage(ctx, next); err != nil || v.Shortfall != 0 {
		t.Fatalf("next demo session: shortfall %s (%v)", v.Shortfall, err)
	}
}
