package projections

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

// countingStore adds EventCounter to a store, counting in SQL.
type countingStore struct {
	eventstore.Store
	pool  *pgxpool.Pool
	calls int
}

func (s *countingStore) CountEvents(ctx context.Context, after, upTo eventstore.Position, limit int64) (int64, error) {
	s.calls++
	return s.Store.(EventCounter).CountEvents(ctx, after, upTo, limit)
}

func TestStatusReportsLag(t *testing.T) {
	e := newEnv(t)
	c, idle := newCounter("stat"), newCounter("idle")
	last := visible(t, e.store, appendBulk(t, e.store, 1234, 4))

	st, err := Status(context.Background(), e.pool, e.store, c, idle)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Lag != 1234 || s.Active || s.UpdatedAt != nil || s.Checkpoint != eventstore.Start || s.Head != last {
			t.Fatalf("before any run: %+v", s)
		}
	}
	cs := &countingStore{Store: e.store, pool: e.pool}
	st, err = Status(context.Background(), e.pool, cs, c)
	if err != nil || st[0].Lag != 1234 || cs.calls != 1 {
		t.Fatalf("with an EventCounter: %+v, %v (%d calls)", st, err, cs.calls)
	}

	r := testRunner(e.store, e.pool, e.log, c)
	r.LagLimit = 1000
	if n, err := r.Lag(context.Background()); err != nil || n != 1000 {
		t.Fatalf("Lag before running = %d, %v; want 1000 (capped)", n, err)
	}
	start(t, r)
	if err := r.WaitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	more := visible(t, e.store, appendEvents(t, e.store, 3, 2))
	st, err = Status(context.Background(), e.pool, e.store, c, idle)
	if err != nil {
		t.Fatal(err)
	}
	// The runner may or may not have applied the 3 new events yet.
	if s := st[0]; !s.Active || s.UpdatedAt == nil || s.Lag > 3 || s.Checkpoint.Less(last) || s.Head != more {
		t.Fatalf("running projector: %+v", s)
	}
	if s := st[1]; s.Active || s.Lag != 1237 {
		t.Fatalf("idle projector: %+v", s)
	}
	if err := r.WaitFor(context.Background(), more); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Lag(context.Background()); err != nil || n != 0 {
		t.Fatalf("Lag when caught up = %d, %v", n, err)
	}
	st, err = r.Status(context.Background())
	if err != nil || st[0].Lag != 0 || st[0].Checkpoint != more {
		t.Fatalf("caught up: %+v, %v", st, err)
	}
}

// TestLagsOfOtherCheckpoints: Lags measures checkpoints other runners keep
// against the same head, alongside the runner's own (worst) lag, which is
// counted once from its earliest checkpoint.
func TestLagsOfOtherCheckpoints(t *testing.T) {
	e := newEnv(t)
	c, other := newCounter("mine"), newCounter("other")
	first := visible(t, e.store, appendEvents(t, e.store, 5, 1))
	cs := &countingStore{Store: e.store, pool: e.pool}
	r := testRunner(cs, e.pool, e.log, c, newCounter("mine2"))
	start(t, r)
	if err := r.WaitFor(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	// "other" is applied up to first by its own catch-up, then stands still.
	if err := CatchUp(context.Background(), e.store, e.pool, e.log, other); err != nil {
		t.Fatal(err)
	}
	more := visible(t, e.store, appendEvents(t, e.store, 4, 1))
	if err := r.WaitFor(context.Background(), more); err != nil {
		t.Fatal(err)
	}
	cs.calls = 0
	lag, others, err := r.Lags(context.Background(), 0, 0, "other", "never-ran")
	if err != nil || lag != 0 || others["other"] != 4 || len(others) != 1 || cs.calls != 1 {
		t.Fatalf("Lags = %d, %v, %v (%d counts); want 0, other 4, never-ran missing, one count", lag, others, err, cs.calls)
	}
	// A caller's limit raises the runner's LagLimit: a readiness check
	// counts one past its threshold even when the runner's default is
	// lower.
	r.LagLimit = 2
	if _, others, err := r.Lags(context.Background(), 0, 0, "other"); err != nil || others["other"] != 2 {
		t.Fatalf("Lags capped by LagLimit 2 = %v, %v; want other 2", others, err)
	}
	if _, others, err := r.Lags(context.Background(), 0, 10, "other"); err != nil || others["other"] != 4 {
		t.Fatalf("Lags with othersLimit 10 over LagLimit 2 = %v, %v; want other 4", others, err)
	}
	if _, others, err := r.Lags(context.Background(), 0, 3, "other"); err != nil || others["other"] != 3 {
		t.Fatalf("Lags with othersLimit 3 = %v, %v; want other 3", others, err)
	}
	r.LagLimit = 0
	if n, err := r.Lag(context.Background()); err != nil || n != 0 {
		t.Fatalf("Lag = %d, %v", n, err)
	}
}

// pagingStore hides the PostgreSQL store's CountEvents, as a store that
// cannot count a range (KurrentDB) has none.
type pagingStore struct{ eventstore.Store }

// Without an EventCounter, countEvents pages through ReadAll: it agrees
// with the SQL count across page boundaries, at the range's edges, and
// stops at its limit.
func TestCountEventsPagesWithoutCounter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	visible(t, e.store, appendBulk(t, e.store, 2345, 3))
	all, err := e.store.ReadAll(ctx, eventstore.Start, 10000)
	if err != nil || len(all) != 2345 {
		t.Fatalf("read %d events, %v", len(all), err)
	}
	var ps eventstore.Store = pagingStore{e.store}
	if _, ok := ps.(EventCounter); ok {
		t.Fatal("pagingStore still counts in SQL")
	}
	at := func(i int) eventstore.Position {
		if i < 0 {
			return eventstore.Start
		}
		return all[i].Position
	}
	for _, c := range []struct {
		from, to int
		limit    int64
	}{
		{-1, 2344, 0}, {-1, 2344, 1000}, {-1, 2344, 1500}, {-1, 2344, 5000},
		{998, 2100, 0}, {999, 1999, 0}, {0, 0, 0}, {2000, 1000, 0}, {10, 11, 1},
	} {
		want, err := e.store.CountEvents(ctx, at(c.from), at(c.to), c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := countEvents(ctx, ps, at(c.from), at(c.to), c.limit); err != nil || got != want {
			t.Errorf("paged count (%d, %d] limit %d = %d, %v; want %d", c.from, c.to, c.limit, got, err, want)
		}
	}
}
