package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/eventstore/storetest"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// countProjector counts events per stream in <prefix>_counts and records
// every application in <prefix>_seen, which has no unique key so that a
// doubly applied event shows up as a duplicate row.
type countProjector struct {
	name   string
	prefix string
	// failOn makes Apply fail after writing the rows of the matching event.
	failOn atomic.Pointer[func(eventstore.RecordedEvent) bool]
}

func newCounter(name string) *countProjector { return &countProjector{name: name, prefix: name} }

func (c *countProjector) Name() string { return c.name }

func (c *countProjector) Schema() string {
	return fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %[1]s_counts (stream text PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE IF NOT EXISTS %[1]s_seen (
    event_id uuid NOT NULL, stream text NOT NULL, commit_pos bigint NOT NULL, prepare_pos bigint NOT NULL);
CREATE INDEX IF NOT EXISTS %[1]s_seen_event ON %[1]s_seen (event_id);`, c.prefix)
}

func (c *countProjector) Tables() []string { return []string{c.prefix + "_counts", c.prefix + "_seen"} }

func (c *countProjector) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	fail := c.failOn.Load()
	for _, e := range events {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO `+c.prefix+`_seen (event_id, stream, commit_pos, prepare_pos) VALUES ($1, $2, $3, $4)`,
			e.ID, e.Stream, int64(e.Position.Commit), int64(e.Position.Prepare))
		b.Queue(`INSERT INTO `+c.prefix+`_counts (stream, n) VALUES ($1, 1)
		         ON CONFLICT (stream) DO UPDATE SET n = `+c.prefix+`_counts.n + 1`, e.Stream)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if fail != nil && (*fail)(e) {
			return errors.New("injected failure")
		}
	}
	return nil
}

type env struct {
	url   string
	pool  *pgxpool.Pool
	store *postgres.Store
	log   *zap.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := pgtest.NewURL(t)
	e := &env{url: url, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
	e.pool, e.store = openStore(t, url)
	return e
}

// openStore opens another pool and store on the same database, as a second
// process would.
func openStore(t *testing.T, url string) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	pool := pgtest.OpenPool(t, url)
	store := postgres.New(pool)
	store.PollInterval = 50 * time.Millisecond
	t.Cleanup(store.Close)
	return pool, store
}

// appendEvents appends n single-event appends over streams s-0..s-(k-1) and
// returns the position of the last.
func appendEvents(t testing.TB, store eventstore.Store, n, k int) eventstore.Position {
	t.Helper()
	var last eventstore.Position
	for i := 0; i < n; i++ {
		res, err := store.Append(context.Background(), eventstore.StreamAppend{
			Stream:   fmt.Sprintf("s-%d", i%k),
			Expected: eventstore.Any,
			Events:   []eventstore.EventData{{ID: uuid.New(), Type: "Tested", Data: []byte(`{}`)}},
		})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		last = res.Position
	}
	return last
}

// appendBulk appends n events in appends of 100 events each, for volume.
func appendBulk(t testing.TB, store eventstore.Store, n, k int) eventstore.Position {
	t.Helper()
	var last eventstore.Position
	for done := 0; done < n; {
		var appends []eventstore.StreamAppend
		for s := 0; s < k && done < n; s++ {
			a := eventstore.StreamAppend{Stream: fmt.Sprintf("s-%d", s), Expected: eventstore.Any}
			for j := 0; j < 100/k+1 && done < n; j++ {
				a.Events = append(a.Events, eventstore.EventData{ID: uuid.New(), Type: "Tested", Data: []byte(`{}`)})
				done++
			}
			appends = append(appends, a)
		}
		res, err := store.Append(context.Background(), appends...)
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		last = res.Position
	}
	return last
}

// testRunner is NewRunner with timings for tests. Reads lag behind appends
// by however long the oldest transaction on the whole server runs (the
// store's visibility horizon), and other suites share the server: be
// generous with WaitFor.
func testRunner(store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, ps ...Projector) *Runner {
	r := NewRunner(store, pool, log, ps...)
	r.WaitTimeout = 30 * time.Second
	r.LockRetry = 100 * time.Millisecond
	r.RetryBackoff = 20 * time.Millisecond
	// Tests that inject failures retry them until they clear; the tests
	// of parking set their own.
	r.ParkAfter = 1 << 30
	return r
}

// visible waits until the store's head reaches pos (see testRunner).
func visible(t testing.TB, store eventstore.Store, pos eventstore.Position) eventstore.Position {
	t.Helper()
	return storetest.WaitReadable(t, store, pos)
}

// start runs r until the returned stop (also called at cleanup).
func start(t *testing.T, r *Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func count(t *testing.T, db queryRower, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func checkpointOf(t *testing.T, pool *pgxpool.Pool, name string) eventstore.Position {
	t.Helper()
	cps, err := loadCheckpoints(context.Background(), pool, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	return cps[name]
}

// checkExactlyOnce asserts that c's read model is what applying every event
// up to its checkpoint exactly once gives, and that the checkpoint covers
// at least want events.
func checkExactlyOnce(t *testing.T, pool *pgxpool.Pool, c *countProjector, want int64) {
	t.Helper()
	// One snapshot for all the checks: the runner may still be committing.
	tx, err := pool.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	var cp eventstore.Position
	if err := tx.QueryRow(context.Background(), `SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = $1`,
		c.name).Scan(&cp.Commit, &cp.Prepare); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	upTo := `(tx_id, seq) <= ($1::text::xid8, $2)`
	args := []any{fmt.Sprint(cp.Commit), int64(cp.Prepare)}
	events := count(t, tx, `SELECT count(*) FROM es_events WHERE `+upTo, args...)
	if events < want {
		t.Fatalf("checkpoint %s covers %d events, want at least %d", cp, events, want)
	}
	seen := count(t, tx, `SELECT count(*) FROM `+c.prefix+`_seen`)
	distinct := count(t, tx, `SELECT count(DISTINCT event_id) FROM `+c.prefix+`_seen`)
	if seen != events || distinct != events {
		dumpMissing(t, tx, c, cp)
		t.Fatalf("applied %d times (%d distinct events), want each of %d events once", seen, distinct, events)
	}
	missing := count(t, tx, `SELECT count(*) FROM es_events e WHERE `+upTo+`
		AND NOT EXISTS (SELECT 1 FROM `+c.prefix+`_seen s WHERE s.event_id = e.event_id)`, args...)
	if missing != 0 {
		t.Fatalf("%d events not applied", missing)
	}
	diff := count(t, tx, `SELECT count(*) FROM (
		(SELECT stream_id, count(*) FROM es_events WHERE `+upTo+` GROUP BY stream_id
		 EXCEPT SELECT stream, n FROM `+c.prefix+`_counts)
		UNION ALL
		(SELECT stream, n FROM `+c.prefix+`_counts
		 EXCEPT SELECT stream_id, count(*) FROM es_events WHERE `+upTo+` GROUP BY stream_id)) d`, args...)
	if diff != 0 {
		t.Fatalf("%d per-stream counts differ from a full replay", diff)
	}
}

// dumpMissing logs the events not applied and the neighbourhood, to debug.
func dumpMissing(t *testing.T, pool pgx.Tx, c *countProjector, cp eventstore.Position) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT e.tx_id::text, e.seq, e.stream_id, e.recorded_at, s.event_id IS NOT NULL
		  FROM es_events e LEFT JOIN (SELECT DISTINCT event_id FROM `+c.prefix+`_seen) s ON s.event_id = e.event_id
		 ORDER BY e.tx_id, e.seq`)
	if err != nil {
		t.Log(err)
		return
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var (
			tx     string
			seq    int64
			stream string
			at     time.Time
			ok     bool
		)
		if err := rows.Scan(&tx, &seq, &stream, &at, &ok); err != nil {
			t.Log(err)
			return
		}
		lines = append(lines, fmt.Sprintf("%s/%d %s %s applied=%v", tx, seq, stream, at.Format("15:04:05.000000"), ok))
	}
	for i, l := range lines {
		if strings.HasSuffix(l, "false") {
			lo, hi := max(0, i-3), min(len(lines), i+4)
			t.Logf("missing, checkpoint %s:\n%s", cp, strings.Join(lines[lo:hi], "\n"))
		}
	}
}

// The PostgreSQL store counts lag with SQL, never by reading events.
var _ EventCounter = (*postgres.Store)(nil)

// service is the application over the env's store with one merchant, and
// that merchant's test-environment actor.
func (e *env) service(t *testing.T) (*app.Service, app.Actor) {
	t.Helper()
	svc := app.NewService(app.NewEngine(e.store, 100))
	m, err := svc.CreateMerchant(context.Background(), "Shop", true, "NG", func(k string) string { return "d-" + k })
	if err != nil {
		t.Fatal(err)
	}
	return svc, app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
}

// allowed lets a customer buy, sell and withdraw.
var allowed = customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}

// escrowParties is a service on e's store with a merchant (see service), a
// seller and a buyer of that merchant, and the buyer topped up with
// 100,000 naira.
func (e *env) escrowParties(t *testing.T) (svc *app.Service, a app.Actor, seller, buyer string) {
	t.Helper()
	ctx := context.Background()
	svc, a = e.service(t)
	var ids [2]string
	for i := range ids {
		id, _, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
			Email: fmt.Sprintf("c%d@x.co", i), Phone: fmt.Sprintf("0803777000%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	seller, buyer = ids[0], ids[1]
	if _, _, err := svc.TopUp(ctx, a, buyer, money.Naira(100000)); err != nil {
		t.Fatal(err)
	}
	return svc, a, seller, buyer
}

// reapplyAll applies the whole log once more to p, outside any runner and
// checkpoint, in one transaction: an idempotent projector changes nothing.
func reapplyAll(t *testing.T, e *env, p Projector) {
	t.Helper()
	ctx := context.Background()
	events, err := e.store.ReadAll(ctx, eventstore.Start, 10000)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(ctx, tx, events); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// applyConcurrently runs one applier of p up to head per batch size, all at
// once and without the advisory lock (as overlapping appliers after a lost
// lock connection), and fails the test if any of them fails.
func applyConcurrently(t *testing.T, e *env, p Projector, head eventstore.Position, batches ...int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(batches))
	for _, batch := range batches {
		wg.Go(func() {
			_, err := applyUpTo(context.Background(), e.store, e.pool, p, head, batch, nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
