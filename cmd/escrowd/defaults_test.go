package main

import (
	"context"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// merchant set-defaults --auto-release sets what a new escrow takes when
// its request leaves autoRelease out; a request's own value wins, and a
// call without the flag keeps the default.
func TestSetDefaultsAutoRelease(t *testing.T) {
	db := pgtest.NewURL(t)
	merchantID := cliMerchant(t, db, "Acme", "--business")
	env := testEnv(t, db)
	svc := service(env)
	create := func(autoRelease *bool) bool {
		t.Helper()
		res, err := svc.CreateEscrow(context.Background(), app.Actor{MerchantID: merchantID, Environment: domain.Test}, "",
			escrow.Draft{Amount: money.Naira(10000), Purpose: "Phone", WhoPays: "buyer", AutoRelease: autoRelease})
		if err != nil {
			t.Fatal(err)
		}
		return res.Escrow.Terms.AutoRelease
	}
	no, yes := false, true
	if create(nil) {
		t.Fatal("a new merchant's escrows auto-release by default")
	}
	for _, step := range []struct {
		args []string
		want bool
	}{
		{[]string{"--auto-release"}, true},
		{nil, true}, // no flag: kept
		{[]string{"--auto-release=false"}, false},
		{[]string{"--auto-release=true"}, true},
	} {
		if _, err := cli(t, db, append([]string{"merchant", "set-defaults", "--merchant", merchantID}, step.args...)...); err != nil {
			t.Fatal(err)
		}
		svc = service(env) // the operator's change, seen by a new process
		if got := create(nil); got != step.want {
			t.Fatalf("after set-defaults %v: autoRelease %v, want %v", step.args, got, step.want)
		}
		if create(&no) || !create(&yes) {
			t.Fatalf("after set-defaults %v: a request's autoRelease is not what it says", step.args)
		}
	}
	if _, err := cli(t, db, "merchant", "set-defaults", "--merchant", merchantID, "--auto-release=maybe"); err == nil {
		t.Fatal("--auto-release=maybe accepted")
	}
}
