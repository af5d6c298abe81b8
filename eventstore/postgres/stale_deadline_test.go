package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// staleKey marks the context of an append whose pooled connection comes
// with a read deadline left over from an earlier statement.
type staleKey struct{}

// A pooled connection can come with a read deadline already past: pgx
// sets one on the socket when a statement's context is cancelled, and one
// cancelled just as its statement ends can leave it behind for the
// connection's next user. The append's statement is then sent and runs,
// and reading its answer fails at once with "timeout: read tcp … i/o
// timeout" while the append's own context is fine. The append is stored
// by then; it must answer so, once, not fail (a caller would retry a
// payment that went through, or report an error for it).
func TestAppendSurvivesAStaleReadTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var staled atomic.Int32
	cfg.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		if ctx.Value(staleKey{}) != nil && staled.Add(1) == 1 {
			if err := c.PgConn().Conn().SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := postgres.New(pool)
	t.Cleanup(s.Close)

	stream := "stale-" + uuid.NewString()[:8]
	ev := eventstore.EventData{ID: uuid.New(), Type: "Paid", Data: []byte(`{"n":1}`)}
	res, err := s.Append(context.WithValue(ctx, staleKey{}, true),
		eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream, Events: []eventstore.EventData{ev}})
	if staled.Load() == 0 {
		t.Fatal("no connection was given a stale deadline: the test proves nothing")
	}
	if err != nil {
		t.Fatalf("append on a connection with a stale read deadline: %v", err)
	}
	got, err := s.ReadStream(ctx, stream, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != ev.ID || res.Revisions[stream] != 0 || res.Position != got[0].Position {
		t.Fatalf("stored %+v; append answered %+v", got, res)
	}
}
