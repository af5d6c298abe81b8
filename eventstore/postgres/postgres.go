// Package postgres is the PostgreSQL adapter of the event store port.
//
// Global order is (transaction id, sequence). ReadAll only returns events
// below the horizon: older than the oldest transaction still running that
// appends to the log (es_horizon), so a reader that advances past an event
// never misses one that commits later with an earlier position, and no
// transaction that cannot append (in another database, a long read, an
// idle session) holds a reader back. Appends are a single call of the es_append
// function (one round trip); NOTIFY is sent after commit, outside the append
// transaction, because NOTIFY inside a transaction serialises commits.
package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

const notifyChannel = "escrowd_events"

// Store implements eventstore.Store on PostgreSQL.
type Store struct {
	pool *pgxpool.Pool
	wake *broadcaster

	tail *tail
	bg   context.Context // lives until Close

	notifyOnce sync.Once
	notifyCh   chan struct{}
	// self is the payload of this store's notifications, so that its own
	// listener knows them: its appends woke its subscribers already.
	self string
	stop context.CancelFunc
	done chan struct{}

	// PollInterval bounds how long a subscriber sleeps without a wake-up.
	PollInterval time.Duration
	// AppendCalls is how many appends may run at once before the next ones
	// queue and go together in one call (batch.go); 0 turns grouping off.
	// Set it before the first Append.
	AppendCalls int
	group       appendGroup
	// afterGroupCall, when set, runs after each group call that committed
	// (AfterGroupCall).
	afterGroupCall func() error
}

// Option tunes a store at New.
type Option func(*Store)

// AfterGroupCall makes f run after each group call (batch.go) that
// committed, before its answer is used: an error f returns stands for the
// call's answer, as when the connection is lost after the commit, so the
// appends of the call find out alone what it stored.
func AfterGroupCall(f func() error) Option { return func(s *Store) { s.afterGroupCall = f } }

// New returns a store on pool, tuned by opts, and starts its LISTEN loop
// and NOTIFY sender. Close stops them; the pool stays the caller's.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		pool:         pool,
		wake:         newBroadcaster(),
		notifyCh:     make(chan struct{}, 1),
		stop:         cancel,
		done:         make(chan struct{}),
		PollInterval: 500 * time.Millisecond,
		AppendCalls:  DefaultAppendCalls,
		bg:           ctx,
		self:         uuid.NewString(),
	}
	for _, opt := range opts {
		opt(s)
	}
	s.tail = newTail(s)
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); s.listen(ctx) }()
		go func() { defer wg.Done(); s.sendNotifications(ctx) }()
		wg.Wait()
	}()
	return s
}

// Close stops the background loops.
func (s *Store) Close() {
	s.stop()
	<-s.done
	s.tail.mu.Lock()
	started := s.tail.state != 0
	s.tail.mu.Unlock()
	if started {
		<-s.tail.done
	}
}

// Pool exposes the pool for adapters that share it (projections).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
