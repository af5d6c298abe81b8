package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/eventstore/storetest"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// Event store throughput on PostgreSQL (fsync and synchronous_commit on, as
// scripts/pg.sh configures it). An append here is one event to the writer's
// own stream with an exact expected revision, the common command shape, so
// appends/s equals events/s and is bound by commits per second.

func esBenchStore(b *testing.B) *postgres.Store {
	b.Helper()
	s := postgres.New(pgtest.NewPool(b))
	b.Cleanup(s.Close)
	return s
}

func esBenchEvent(i int) []eventstore.EventData {
	return []eventstore.EventData{{
		ID:   uuid.New(),
		Type: "bench.appended",
		Data: fmt.Appendf(nil, `{"i":%d,"amount":"125.50","currency":"NGN"}`, i),
	}}
}

func BenchmarkAppend1Writer(b *testing.B) { benchAppend1Writer(b, esBenchStore(b)) }

func benchAppend1Writer(b *testing.B, s eventstore.Store) {
	ctx := context.Background()
	stream := "bench-" + uuid.NewString()
	expected := eventstore.NoStream
	n := 0
	for b.Loop() {
		res, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: esBenchEvent(n)})
		if err != nil {
			b.Fatal(err)
		}
		expected = eventstore.Exact(res.Revisions[stream])
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkAppend16Writers(b *testing.B) { benchAppendWriters(b, esBenchStore(b), 16) }

func benchAppendWriters(b *testing.B, s eventstore.Store, writers int) {
	ctx := context.Background()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, writers)
	)
	b.ResetTimer()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprintf("bench-%d-%s", w, uuid.NewString())
			expected := eventstore.NoStream
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				res, err := s.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: esBenchEvent(int(i))})
				if err != nil {
					errs <- err
					return
				}
				expected = eventstore.Exact(res.Revisions[stream])
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReadAll reads a log of 100,000 events in pages of 1000, starting
// over at the end; one op is one page.
func BenchmarkReadAll(b *testing.B) {
	const (
		total = 100_000
		page  = 1000
	)
	s := esBenchStore(b)
	ctx := context.Background()
	var last eventstore.AppendResult
	for i := 0; i < total; i += page {
		evs := make([]eventstore.EventData, page)
		for k := range evs {
			evs[k] = esBenchEvent(i + k)[0]
		}
		var err error
		last, err = s.Append(ctx, eventstore.StreamAppend{Stream: fmt.Sprintf("fill-%d", i%37), Expected: eventstore.Any, Events: evs})
		if err != nil {
			b.Fatal(err)
		}
	}
	storetest.WaitReadable(b, s, last.Position) // the filled log

	read := 0
	after := eventstore.Start
	for b.Loop() {
		evs, err := s.ReadAll(ctx, after, page)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) == 0 {
			after = eventstore.Start
			continue
		}
		read += len(evs)
		after = evs[len(evs)-1].Position
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkHeadWhileAWriterIsOpen: the log's head (one es_horizon call and
// the newest event below it) while another transaction of the database is
// a log writer, as under a steady stream of appends, when the horizon has
// to find each writer's transaction id. One op is one Head.
func BenchmarkHeadWhileAWriterIsOpen(b *testing.B) {
	s := esBenchStore(b)
	ctx := context.Background()
	if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: "head-1", Expected: eventstore.NoStream, Events: esBenchEvent(0)}); err != nil {
		b.Fatal(err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT es_writer_begin(); SELECT pg_current_xact_id()`); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Head(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
