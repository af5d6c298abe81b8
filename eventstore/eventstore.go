// Package eventstore is the port between command handlers and the durable
// event log. Adapters (postgres, kurrent) implement Store and must pass the
// shared conformance suite in eventstore/storetest.
package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Revision of a stream: the zero-based index of its last event.
// The special values below express append expectations.
type ExpectedRevision int64

const (
	// Any appends regardless of the stream's current revision.
	Any ExpectedRevision = -2
	// NoStream requires that the stream has no events yet.
	NoStream ExpectedRevision = -1
)

// Exact requires the stream's last event to be at revision r.
func Exact(r uint64) ExpectedRevision { return ExpectedRevision(r) }

func (e ExpectedRevision) String() string {
	switch e {
	case Any:
		return "any"
	case NoStream:
		return "no-stream"
	default:
		return fmt.Sprintf("%d", int64(e))
	}
}

// Position is a place in the global log. Commit orders transactions and
// Prepare orders events within (and across) them; compare with Less.
// For PostgreSQL Commit is the writing transaction's id and Prepare a
// sequence number; for KurrentDB they are the server's log positions.
type Position struct {
	Commit  uint64 `json:"commit"`
	Prepare uint64 `json:"prepare"`
}

// Start is the position before the first event.
var Start = Position{}

// Less reports whether p comes strictly before q in the global order.
func (p Position) Less(q Position) bool {
	if p.Commit != q.Commit {
		return p.Commit < q.Commit
	}
	return p.Prepare < q.Prepare
}

// AtLeast reports whether p is at or after q.
func (p Position) AtLeast(q Position) bool { return !p.Less(q) }

func (p Position) String() string { return fmt.Sprintf("%d/%d", p.Commit, p.Prepare) }

// EventData is an event to append. ID makes appends idempotent: appending an
// event whose ID is already stored in the same stream at the same place is a
// no-op success; an ID stored elsewhere is an error (ErrDuplicateEvent)
// where the store can tell: KurrentDB knows ids only within a stream
// (storetest.Limits.EventIDsPerStream), so event ids must be new for each
// append that is not a repeat.
type EventData struct {
	ID       uuid.UUID
	Type     string
	Data     []byte // JSON
	Metadata []byte // JSON, may be nil
}

// StreamAppend is the write to one stream within an atomic Append.
//
// A stream without events is a revision check: the append fails with a
// *ConcurrencyError, writing nothing, unless the stream is at Expected.
// By default the check holds the stream until the append commits, so no
// append to it commits in between (a decision that must not race a change
// of what it read: a payout and the removal of its whitelist entry).
// Observed asks less: that the stream was at Expected at some moment
// during the append. It takes no lock, so that appends observing the same
// stream (every escrow a merchant creates reads the merchant's fees) do
// not queue behind each other; it proves what reading the stream just
// before appending would, without the read's round trip.
type StreamAppend struct {
	Stream   string
	Expected ExpectedRevision
	Events   []EventData
	Observed bool // only for a stream without events
}

// RecordedEvent is an event as stored.
type RecordedEvent struct {
	ID         uuid.UUID
	Stream     string
	Revision   uint64
	Position   Position
	Type       string
	Data       []byte
	Metadata   []byte
	RecordedAt time.Time
}

// AppendResult reports where an append landed.
type AppendResult struct {
	// Position of the last event written (the commit point to wait for).
	Position Position
	// NextRevisions holds each stream's revision after the append.
	Revisions map[string]uint64
}

// ErrConcurrency is returned (wrapped in *ConcurrencyError) when an expected
// revision does not match. Nothing of the append is written.
var ErrConcurrency = errors.New("eventstore: wrong expected revision")

// ErrDuplicateEvent is returned when an event id already exists in another
// place than the one the append would put it.
var ErrDuplicateEvent = errors.New("eventstore: event id already used")

// ConcurrencyError names the stream whose expectation failed.
type ConcurrencyError struct {
	Stream   string
	Expected ExpectedRevision
	Actual   int64 // -1 when the stream does not exist
}

func (e *ConcurrencyError) Error() string {
	return fmt.Sprintf("eventstore: stream %q expected revision %s, actual %d", e.Stream, e.Expected, e.Actual)
}

func (e *ConcurrencyError) Unwrap() error { return ErrConcurrency }

// Store is the event store port.
type Store interface {
	// Append writes all streams atomically: either every event is stored or
	// none is. Streams must be distinct. In the global log the events of
	// one append follow each other stream by stream in stream-name order,
	// each stream's in the order given, whatever the order of appends: a
	// reader of the log sees the same order on every store.
	Append(ctx context.Context, appends ...StreamAppend) (AppendResult, error)
	// ReadStream returns up to limit events of stream from revision from
	// (inclusive), in order. A missing stream yields no events and no error.
	ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]RecordedEvent, error)
	// ReadAll returns up to limit events of the global log strictly after
	// position after, in global order. It never returns an event while an
	// earlier one may still commit, so a reader advancing its position by
	// the last event returned never skips one.
	ReadAll(ctx context.Context, after Position, limit int) ([]RecordedEvent, error)
	// Head is the position of the last event ReadAll can currently return.
	Head(ctx context.Context) (Position, error)
	// Last is the position of the newest committed event, which ReadAll
	// may not return yet (a store with a horizon holds it back while an
	// older transaction is open). Every append acknowledged before the
	// call is at or before it, so a reader that has reached Last has seen
	// all of them: it is what a read waits for to see every earlier write.
	Last(ctx context.Context) (Position, error)
	// Subscribe calls handle with every event after position after, first
	// catching up and then following new events as they commit, until ctx
	// ends or handle returns an error (which Subscribe returns).
	Subscribe(ctx context.Context, after Position, handle func(context.Context, []RecordedEvent) error) error
	Close()
}

// Horizon describes events that have committed but that ReadAll does not
// return yet. A store that numbers events before they commit (PostgreSQL)
// holds every later event back while an older transaction that appends to
// the log is still open, so that a reader never skips one; such a
// transaction left open holds the whole log back, projections and webhooks
// included, while the lag of each reader still reads zero.
type Horizon struct {
	// Held counts committed events beyond Head, up to the cap the caller
	// asked for.
	Held int64 `json:"heldEvents"`
	// HeldFor is how long the oldest held event has waited; zero when none
	// is held.
	HeldFor time.Duration `json:"-"`
	// Blocker describes the oldest open transaction when HeldFor is long
	// enough to look for it and the store can tell (empty otherwise).
	Blocker string `json:"blockedBy,omitempty"`
}

// HorizonReporter is implemented by stores whose log can be held back by an
// open transaction (see Horizon). Stores that order events at commit, such
// as KurrentDB, have no such horizon and do not implement it.
type HorizonReporter interface {
	// Horizon counts held events up to limit and, when the oldest has waited
	// longer than explainAfter, names what holds them.
	Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (Horizon, error)
}
