package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// appendNew appends one event to a new stream and returns its position.
func appendNew(t *testing.T, s *postgres.Store, stream string, meta []byte) eventstore.Position {
	t.Helper()
	res, err := s.Append(context.Background(), eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "E", Data: []byte(`{}`), Metadata: meta}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Position
}

func poolURL(pool *pgxpool.Pool) string { return pool.Config().ConnString() }

// TestHorizonIgnoresTransactionsThatCannotAppend: a transaction holding a
// transaction id in another database of the server, or in this one
// without appending (a long read-model job, an idle session), cannot
// commit an event: every reader of the log (ReadAll, Head, ReadTenant,
// CountTenant, Horizon) sees the events committed while it stays open.
func TestHorizonIgnoresTransactionsThatCannotAppend(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name string
		open func() func()
	}{
		{"another database", func() func() { _, end := pgtest.OpenTransactionElsewhere(t); return end }},
		{"this database", func() func() { return pgtest.OpenTransactionHere(t, poolURL(pool)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			end := c.open()
			defer end()
			m := "m-" + uuid.NewString()[:8]
			meta := []byte(`{"merchantId":"` + m + `","environment":"test"}`)
			pos := appendNew(t, s, "open-"+uuid.NewString()[:8], meta)
			head, err := s.Head(ctx)
			if err != nil || head.Less(pos) {
				t.Fatalf("head %v (%v) is behind the committed event %v", head, err, pos)
			}
			evs, err := s.ReadAll(ctx, eventstore.Position{Commit: pos.Commit, Prepare: pos.Prepare - 1}, 10)
			if err != nil || len(evs) != 1 || evs[0].Position != pos {
				t.Fatalf("ReadAll after the event's predecessor: %v %v", evs, err)
			}
			f := eventstore.TenantFilter{MerchantID: m, Environment: "test"}
			if got, err := s.ReadTenant(ctx, f, eventstore.Start, 0, 10); err != nil || len(got) != 1 {
				t.Fatalf("ReadTenant: %v %v", got, err)
			}
			if n, err := s.CountTenant(ctx, f); err != nil || n != 1 {
				t.Fatalf("CountTenant: %d %v", n, err)
			}
			if h, err := s.Horizon(ctx, 0, 0); err != nil || h.Held != 0 || h.Blocker != "" {
				t.Fatalf("Horizon: %+v %v", h, err)
			}
		})
	}
}

// TestHorizonWaitsForAnOpenLogWriter keeps what the horizon exists for:
// while a transaction that appended is open, an event committed after it
// (with a higher position) is not returned, so no reader passes the open
// one's position; Last still covers the acknowledged append. Horizon counts
// the held events, names the writer once the wait passes explainAfter, and
// clears when it ends.
func TestHorizonWaitsForAnOpenLogWriter(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := "writer-" + uuid.NewString()[:8]
	before := appendNew(t, s, p+"-before", nil)
	stream, end := pgtest.OpenLogWriter(t, poolURL(pool))
	defer end()
	pos := []eventstore.Position{appendNew(t, s, p+"-a", nil), appendNew(t, s, p+"-b", nil)}
	head, err := s.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Less(head) || head.Less(before) {
		t.Fatalf("head %v, want %v: it passed events held by an open log writer (%v)", head, before, pos)
	}
	if evs, err := s.ReadAll(ctx, before, 10); err != nil || len(evs) != 0 {
		t.Fatalf("ReadAll returned %d events past an open log writer (%v)", len(evs), err)
	}
	if last, err := s.Last(ctx); err != nil || last.Less(pos[1]) {
		t.Fatalf("last %v (%v) is before the acknowledged append %v", last, err, pos[1])
	}
	// Held for 150 ms: the explanation below is asked for past 100 ms.
	var quiet eventstore.Horizon
	waitFor(t, func() bool {
		quiet, err = s.Horizon(ctx, 0, time.Hour)
		return err != nil || quiet.HeldFor >= 150*time.Millisecond
	})
	if err != nil || quiet.Held != 2 || quiet.HeldFor < 150*time.Millisecond || quiet.Blocker != "" {
		t.Fatalf("without explaining: %+v %v", quiet, err)
	}
	if capped, err := s.Horizon(ctx, 1, time.Hour); err != nil || capped.Held != 1 {
		t.Fatalf("capped at 1: %+v %v", capped, err)
	}
	explained, err := s.Horizon(ctx, 0, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pgtest-open-log-writer", "es_append", stream, "idle in transaction"} {
		if !strings.Contains(explained.Blocker, want) {
			t.Errorf("blocker %q lacks %q", explained.Blocker, want)
		}
	}
	end()
	evs, err := s.ReadAll(ctx, before, 10)
	if err != nil || len(evs) != 2 || evs[0].Position != pos[0] || evs[1].Position != pos[1] {
		t.Fatalf("after the writer ended: %v %v, want %v", evs, err, pos)
	}
	if h, err := s.Horizon(ctx, 0, 0); err != nil || h.Held != 0 {
		t.Fatalf("still held after the writer ended: %+v %v", h, err)
	}
}

// TestHorizonNamesTheOldestOpenWriter: with two log writers open, Horizon
// names the older one, whose end lets the held events through first; the
// younger is named once the older ends.
func TestHorizonNamesTheOldestOpenWriter(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	older, endOlder := pgtest.OpenLogWriter(t, poolURL(pool))
	younger, endYounger := pgtest.OpenLogWriter(t, poolURL(pool))
	defer endYounger()
	appendNew(t, s, "named-"+uuid.NewString()[:8], nil)
	if h, err := s.Horizon(ctx, 0, 0); err != nil || !strings.Contains(h.Blocker, older) {
		t.Fatalf("named %+v (%v), want the older writer of %s", h, err, older)
	}
	endOlder()
	if h, err := s.Horizon(ctx, 0, 0); err != nil || !strings.Contains(h.Blocker, younger) {
		t.Fatalf("after the older ended: named %+v (%v), want the writer of %s", h, err, younger)
	}
}

// TestAppendMustBeTheFirstWrite: a transaction that wrote something else
// and then appends is refused (the horizon would not have counted it as a
// writer while it wrote), through es_append and through a direct insert
// into the log; a transaction that appends twice is one writer.
func TestAppendMustBeTheFirstWrite(t *testing.T) {
	_, pool := newStore(t)
	ctx := context.Background()
	appendSQL := `SELECT tx FROM es_append(ARRAY[$1], ARRAY[-1]::bigint[], ARRAY[1], ARRAY[gen_random_uuid()],
		ARRAY['E'], ARRAY['{}']::json[], ARRAY[NULL]::json[], ARRAY[1], ARRAY[0])`
	insertSQL := `INSERT INTO es_events (event_id, stream_id, revision, event_type, data) VALUES (gen_random_uuid(), $1, 0, 'E', '{}')`
	for _, stmt := range []string{appendSQL, insertSQL} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE scratch (n int) ON COMMIT DROP; INSERT INTO scratch VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, stmt, "late-"+uuid.NewString()[:8])
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "ES003" {
			t.Fatalf("%s after another write: %v, want ES003", stmt, err)
		}
		_ = tx.Rollback(ctx)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, stmt := range []string{appendSQL, insertSQL, appendSQL} {
		if _, err := tx.Exec(ctx, stmt, "twice-"+uuid.NewString()[:8]); err != nil {
			t.Fatalf("%s in a transaction that appended first: %v", stmt, err)
		}
	}
}

// TestHorizonPassesAWriterWithoutAnID: a transaction that announced itself
// as a log writer and has no transaction id yet will commit its events at
// or above any horizon taken now, so it holds nothing back, even while
// another transaction of the database holds an older id. (The horizon
// asks the sessions about such a writer; taking it for one it may not see
// would hold the log at that older id.)
func TestHorizonPassesAWriterWithoutAnID(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer pgtest.OpenTransactionHere(t, poolURL(pool))()
	defer pgtest.OpenAnnouncedWriter(t, poolURL(pool))()
	pos := appendNew(t, s, "announced-"+uuid.NewString()[:8], nil)
	head, err := s.Head(ctx)
	if err != nil || head.Less(pos) {
		t.Fatalf("head %v (%v) is behind the committed event %v", head, err, pos)
	}
	if h, err := s.Horizon(ctx, 0, 0); err != nil || h.Held != 0 {
		t.Fatalf("Horizon: %+v %v", h, err)
	}
}
