package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/eventstore/storetest"
	"github.com/escrowd/escrowd/internal/pgtest"
)

func newStore(t *testing.T) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewPool(t)
	s := postgres.New(pool)
	t.Cleanup(s.Close)
	return s, pool
}

func TestConformance(t *testing.T) {
	pgtest.ServerURL(t) // skip the whole suite without a server
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		s, _ := newStore(t)
		return s
	})
}

// TestReadAllWaitsForOlderTransactions shows the visibility rule that makes
// ReadAll gap-safe: an event committed by a younger transaction is withheld
// while an older transaction that wrote to the log is still open, because
// that older one will take an earlier position when it commits.
func TestReadAllWaitsForOlderTransactions(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := "xmin-" + uuid.NewString()[:8]

	// Transaction 1 appends through es_append, as the adapter does, and
	// stays open.
	old, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(context.Background()) //nolint:errcheck
	oldID := uuid.New()
	var oldTx string
	err = old.QueryRow(ctx,
		`SELECT tx FROM es_append($1, $2, $3, $4::uuid[], $5, $6::json[], $7::json[], $8, $9)`,
		[]string{p + "-old"}, []int64{-1}, []int32{1}, []string{oldID.String()},
		[]string{"Old"}, []string{`{"n":1}`}, []*string{nil}, []int32{1}, []int32{0},
	).Scan(&oldTx)
	if err != nil {
		t.Fatalf("es_append in the open transaction: %v", err)
	}

	// A subscriber follows from the start meanwhile.
	var (
		mu  sync.Mutex
		got []eventstore.RecordedEvent
	)
	subCtx, stopSub := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() {
		subDone <- s.Subscribe(subCtx, eventstore.Start, func(_ context.Context, evs []eventstore.RecordedEvent) error {
			mu.Lock()
			got = append(got, evs...)
			mu.Unlock()
			return nil
		})
	}()
	seen := func() []eventstore.RecordedEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]eventstore.RecordedEvent(nil), got...)
	}

	// Transaction 2 (another connection) appends and commits.
	newEv := eventstore.EventData{ID: uuid.New(), Type: "New", Data: []byte(`{"n":2}`)}
	res, err := s.Append(ctx, eventstore.StreamAppend{Stream: p + "-new", Expected: eventstore.NoStream, Events: []eventstore.EventData{newEv}})
	if err != nil {
		t.Fatal(err)
	}
	if oldTx == "" || res.Position.Commit == 0 {
		t.Fatalf("no transaction ids: %q, %v", oldTx, res.Position)
	}

	// It is committed and visible to plain SQL ...
	var committed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM es_events WHERE event_id = $1`, newEv.ID).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed != 1 {
		t.Fatalf("the younger transaction's event is not committed (count %d)", committed)
	}
	// ... but ReadAll, Head and Subscribe hold it back.
	evs, err := s.ReadAll(ctx, eventstore.Start, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 0 {
		t.Fatalf("ReadAll returned %d events while an older transaction is open; want 0", len(evs))
	}
	if h, err := s.Head(ctx); err != nil || h != eventstore.Start {
		t.Fatalf("Head = %v, %v; want Start while an older transaction is open", h, err)
	}
	// The tail that feeds subscribers reads the log twice after the
	// append (its wake-up and a re-poll); what it read, they would have.
	for reads, deadline := postgres.TailReads(s), time.Now().Add(10*time.Second); postgres.TailReads(s) < reads+2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the tail did not read the log after the append")
		}
	}
	if n := len(seen()); n != 0 {
		t.Fatalf("subscriber received %d events while an older transaction is open", n)
	}

	if err := old.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Now both come out, the older transaction's event first, although it
	// committed last. (Other databases' transactions on a shared server can
	// hold the horizon back a little, hence the polling.)
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err = s.ReadAll(ctx, eventstore.Start, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(evs) != 2 || evs[0].ID != oldID || evs[1].ID != newEv.ID {
		t.Fatalf("ReadAll after commit = %v; want [old, new]", evs)
	}
	if !evs[0].Position.Less(evs[1].Position) || evs[1].Position != res.Position {
		t.Errorf("positions %v, %v; want old < new = %v", evs[0].Position, evs[1].Position, res.Position)
	}
	if h, err := s.Head(ctx); err != nil || h != res.Position {
		t.Errorf("Head = %v, %v; want %v", h, err, res.Position)
	}
	for len(seen()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	sub := seen()
	if len(sub) != 2 || sub[0].ID != oldID || sub[1].ID != newEv.ID {
		t.Errorf("subscriber received %d events; want [old, new]", len(sub))
	}
	stopSub()
	if err := <-subDone; !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe returned %v; want context.Canceled", err)
	}
}

// TestOrderIsNumericAcrossDigitBoundaries pins the global order to numeric
// transaction ids where their decimal text sorts differently (99 < 100,
// 999 < 1000). Ids this small are long committed on any cluster, so the
// rows are inserted directly with explicit tx_id values.
func TestOrderIsNumericAcrossDigitBoundaries(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	txs := []string{"9", "10", "99", "100", "101", "999"}
	for i, tx := range txs {
		if _, err := pool.Exec(ctx,
			`INSERT INTO es_events (tx_id, event_id, stream_id, revision, event_type, data)
			 VALUES ($1::text::xid8, $2, 'digits', $3, 'D', '{}')`, tx, uuid.New(), i); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	after := eventstore.Start
	for {
		evs, err := s.ReadAll(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			got = append(got, e.Position.Commit)
		}
		after = evs[len(evs)-1].Position
	}
	want := []uint64{9, 10, 99, 100, 101, 999}
	if len(got) != len(want) {
		t.Fatalf("ReadAll paging returned commits %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ReadAll paging returned commits %v; want %v", got, want)
		}
	}
	h, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Commit != 999 {
		t.Errorf("Head = %v; want commit 999", h)
	}
}

// CountEvents agrees with reading the range, at its edges too.
func TestCountEventsMatchesReadAll(t *testing.T) {
	ctx := context.Background()
	s := postgres.New(pgtest.NewPool(t))
	t.Cleanup(s.Close)
	for i := 0; i < 25; i++ {
		evs := []eventstore.EventData{{ID: uuid.New(), Type: "t", Data: []byte(`{}`)}, {ID: uuid.New(), Type: "t", Data: []byte(`{}`)}}
		if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: fmt.Sprintf("c-%d", i%4), Expected: eventstore.Any, Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	var all []eventstore.RecordedEvent
	deadline := time.Now().Add(10 * time.Second)
	for len(all) < 50 && time.Now().Before(deadline) {
		all, _ = s.ReadAll(ctx, eventstore.Start, 1000)
	}
	if len(all) != 50 {
		t.Fatalf("read %d events", len(all))
	}
	for _, c := range []struct{ from, to int }{{-1, 49}, {-1, 0}, {0, 0}, {3, 17}, {10, 49}, {49, 49}, {20, 10}} {
		after := eventstore.Start
		if c.from >= 0 {
			after = all[c.from].Position
		}
		want := int64(max(0, c.to-c.from))
		if n, err := s.CountEvents(ctx, after, all[c.to].Position, 0); err != nil || n != want {
			t.Errorf("count (%d, %d] = %d, %v; want %d", c.from, c.to, n, err, want)
		}
		for _, limit := range []int64{1, 5, 100} {
			if n, err := s.CountEvents(ctx, after, all[c.to].Position, limit); err != nil || n != min(want, limit) {
				t.Errorf("count (%d, %d] limit %d = %d, %v; want %d", c.from, c.to, limit, n, err, min(want, limit))
			}
		}
	}
}

// TestCloseSendsPendingNotification: a process that appends and closes its
// store at once (an operator command) still announces its events, so other
// processes' subscribers wake for them instead of at their next poll. It
// listens for the notifications themselves: a subscriber woken by one may
// still find the event held back by another test's open transaction on the
// shared server, and would then sleep until its next poll.
func TestCloseSendsPendingNotification(t *testing.T) {
	reader, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+postgres.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		writer := postgres.New(pool)
		id, stream := uuid.New(), "exiting-"+uuid.NewString()[:8]
		res, err := writer.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
			Events: []eventstore.EventData{{ID: id, Type: "E", Data: []byte(`{}`)}}})
		if err != nil {
			t.Fatal(err)
		}
		writer.Close()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = listener.Conn().WaitForNotification(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("append %d by a store closed at once: no notification: %v", i, err)
		}
		storetest.WaitReadable(t, reader, res.Position)
		events, err := reader.ReadStream(ctx, stream, 0, 10)
		if err != nil || len(events) != 1 || events[0].ID != id {
			t.Fatalf("append %d: read back %v (%v), want event %s", i, events, err, id)
		}
	}
}

// notifyHolder is a pgx tracer that holds its pool's first pg_notify, once
// the server has run it, until release is closed.
type notifyHolder struct {
	once    sync.Once
	held    chan struct{} // closed when the first notification is sent and held
	release chan struct{}
}

type notifyKey struct{}

func (h *notifyHolder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, notifyKey{}, strings.Contains(d.SQL, "pg_notify"))
}

func (h *notifyHolder) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if notify, _ := ctx.Value(notifyKey{}).(bool); notify {
		h.once.Do(func() {
			close(h.held)
			<-h.release
		})
	}
}

// TestCloseSendsNotificationQueuedBehindOneInFlight: an append whose
// notification waits behind one still being sent when the store is closed
// is announced all the same. Close has begun (the loops' context is over)
// when the notification in flight returns, so the sender finds both its
// stop and the queued notification ready, and must send the notification
// before it stops. (TestCloseSendsPendingNotification cannot tell: there
// the sender is idle and takes the notification as it is queued.) A
// sender without that check picks its stop half the time, so the test
// goes round several times. It listens for the notifications themselves:
// a subscriber woken by one may still find the event held back by
// another test's open transaction on the shared server.
func TestCloseSendsNotificationQueuedBehindOneInFlight(t *testing.T) {
	url := pgtest.NewURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+postgres.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	notified := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := listener.WaitForNotification(wctx); err != nil {
			t.Fatalf("%s: no notification: %v", what, err)
		}
	}
	appendOne := func(s *postgres.Store) {
		t.Helper()
		if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: "queued-" + uuid.NewString()[:8], Expected: eventstore.NoStream,
			Events: []eventstore.EventData{{ID: uuid.New(), Type: "E", Data: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		h := &notifyHolder{held: make(chan struct{}), release: make(chan struct{})}
		cfg.ConnConfig.Tracer = h
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		writer := postgres.New(pool)
		appendOne(writer)
		select { // its notification went out; the sender is held in it
		case <-h.held:
		case <-ctx.Done():
			t.Fatalf("round %d: the first append's notification never went out", i)
		}
		notified(fmt.Sprintf("round %d, first append", i))
		appendOne(writer) // its notification waits for the sender
		closed := make(chan struct{})
		go func() { writer.Close(); close(closed) }()
		<-postgres.Stopping(writer)
		close(h.release)
		notified(fmt.Sprintf("round %d, append queued behind a notification in flight at Close", i))
		<-closed
		pool.Close()
	}
}

// TestObservedCheckTakesNoLock: an observed check reads the stream's
// revision and goes on while another transaction holds the stream (as an
// append to it does until it commits); a plain zero-event check waits for
// it. Escrow creations observe their merchant's fees stream, and must not
// queue behind each other's commits.
func TestObservedCheckTakesNoLock(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	fees, escrow := "fees-"+uuid.NewString(), "escrow-"+uuid.NewString()
	if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: fees, Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "FeesSet", Data: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM es_streams WHERE stream_id = $1 FOR UPDATE`, fees); err != nil {
		t.Fatal(err)
	}
	write := eventstore.StreamAppend{Stream: escrow, Expected: eventstore.Any,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "Created", Data: []byte(`{}`)}}}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.Append(octx, write, eventstore.StreamAppend{Stream: fees, Expected: eventstore.Exact(0), Observed: true}); err != nil {
		t.Fatalf("observed check while the stream is held: %v", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	write.Events = []eventstore.EventData{{ID: uuid.New(), Type: "Created", Data: []byte(`{}`)}}
	if _, err := s.Append(lctx, write, eventstore.StreamAppend{Stream: fees, Expected: eventstore.Exact(0)}); err == nil {
		t.Fatal("a locking check went through while the stream was held")
	}
}

// TestOwnNotificationsDoNotWakeAgain: an append wakes its own store's
// subscribers when it returns, and its notification wakes other
// processes' stores; the store's own listener, which receives that
// notification too, must not wake them a second time (each wake costs
// every follower a read of the log).
func TestOwnNotificationsDoNotWakeAgain(t *testing.T) {
	a, pool := newStore(t)
	b := postgres.New(pool) // another process, as far as notifications go
	t.Cleanup(b.Close)
	ctx := context.Background()
	// Both listeners are in place once two sessions of the test's own
	// database have run LISTEN.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle' AND query = 'LISTEN ' || $1`, postgres.NotifyChannel).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions listening, want 2", n)
		}
	}
	appendOne := func(s *postgres.Store) {
		t.Helper()
		if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: "s-" + uuid.NewString(), Expected: eventstore.NoStream,
			Events: []eventstore.EventData{{ID: uuid.New(), Type: "E", Data: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitWoken := func(s *postgres.Store, past uint64, what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); postgres.Wakes(s) <= past; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	// PostgreSQL delivers a channel's notifications to each listener in
	// commit order: once b's later notification has woken a, a's listener
	// has handled a's own (and, were it to wake for its own, the count
	// shows it now or in a later round).
	wa := postgres.Wakes(a)
	for round := uint64(1); round <= 3; round++ {
		wb := postgres.Wakes(b)
		appendOne(a)
		waitWoken(b, wb, "the other store was not woken by the notification")
		afterOwn := postgres.Wakes(a)
		appendOne(b)
		waitWoken(a, afterOwn, "the appending store was not woken by the other's notification")
		if got := postgres.Wakes(a) - wa; got != 2*round {
			t.Fatalf("after %d rounds the appending store woke %d times, want %d (its appends' and the other's notifications)", round, got, 2*round)
		}
	}
}
