package chaos

import (
	"context"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestCheckerCustomers: the existence oracle finds a customer missing
// after an acknowledged create (lost), two customers from one create
// (doubled) and a customer made by a create that was refused, and accepts
// what each outcome allows.
func TestCheckerCustomers(t *testing.T) {
	pool := pgtest.OpenPool(t, pgtest.NewEmptyURL(t))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE rm_customers (merchant_id text, environment text, email text);
		INSERT INTO rm_customers VALUES ('m', 'test', 'acked@x'), ('m', 'test', 'twice@x'), ('m', 'test', 'twice@x'),
			('m', 'test', 'refused@x'), ('m', 'test', 'maybe@x'), ('m', 'live', 'lost@x'), ('other', 'test', 'lost@x')`); err != nil {
		t.Fatal(err)
	}
	p := &op{name: "oracle", creates: []createCheck{
		{merchant: "m", email: "acked@x", outcome: acked},       // exactly once: fine
		{merchant: "m", email: "happened@x", outcome: happened}, // executed on a retry, yet absent: lost
		{merchant: "m", email: "lost@x", outcome: acked},        // only in another environment and merchant: lost
		{merchant: "m", email: "twice@x", outcome: unknown},     // at most once, found twice: doubled
		{merchant: "m", email: "maybe@x", outcome: unknown},     // at most once: fine
		{merchant: "m", email: "gone@x", outcome: unknown},      // at most once: fine
		{merchant: "m", email: "refused@x", outcome: refused},   // refused, yet made
	}}
	k := &checker{pool: pool, w: &workload{ops: []*op{p}}}
	v := &verdict{}
	k.customers(ctx, v)
	if v.lost != 2 || v.doubled != 1 || len(v.violations) != 4 {
		t.Fatalf("lost %d doubled %d, violations:\n%s", v.lost, v.doubled, strings.Join(v.violations, "\n"))
	}
	for i, want := range []string{"happened@x", "lost@x", "twice@x", "refused@x"} {
		if !strings.Contains(v.violations[i], want) {
			t.Errorf("violation %d %q, want one about %s", i, v.violations[i], want)
		}
	}
}
