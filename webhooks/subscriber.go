package webhooks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
	"github.com/escrowd/escrowd/view"
)

// SubscriberName is the subscriber's stored checkpoint: never rename it.
const SubscriberName = "webhooks"

// Subscriber turns the global event log into outbox messages. It is a
// projector.Projector, so the runner applies each batch and moves the
// checkpoint in one transaction: a batch's messages are enqueued exactly
// when the checkpoint passes its events, never twice and never lost.
//
// It is deliberately not in projections.All(): `projections rebuild` replays
// the log from the start, which for a read model is harmless but here would
// send every message again. Run it with its own runner, after Install
// (the wiring does both).
type Subscriber struct {
	store eventstore.Store
	// Category finds an escrow's category for the payload; nil when unknown.
	// The categories read model may lag behind the subscriber: then the
	// payload carries no category rather than waiting for it.
	Category func(ctx context.Context, id string) (*view.Category, error)

	// Handoff, when set, is a dispatcher running in this process: the
	// messages it has room for are stored leased to it and handed over as
	// soon as their batch commits, which spares each a wake-up, a lease's
	// select and its update. The rest are queued for any dispatcher, as
	// without Handoff. It relies on the runner's Committed calls.
	Handoff *Dispatcher

	// Sealer, when set, seals the messages' bodies in the outbox with
	// their merchant's data key: a payload names the people and accounts
	// it is about. The dispatcher opens them to send them.
	Sealer domain.Sealer

	mu      sync.Mutex
	escrows map[string]foldedEscrow
	// pending is the enqueue of the batch being applied.
	pending *pendingEnqueue
}

type foldedEscrow struct {
	state escrow.State
	rev   int64 // revision state is folded up to; -1 none
}

// maxCachedEscrows bounds the fold cache; past it, the cache starts over.
const maxCachedEscrows = 50_000

// NewSubscriber returns the subscriber over store; categories finds an
// escrow's category for the payloads (nil when unknown), and is provided by
// the read side (projections.Queries.EscrowCategory).
func NewSubscriber(store eventstore.Store, categories func(ctx context.Context, id string) (*view.Category, error)) *Subscriber {
	return &Subscriber{store: store, Category: categories}
}

func (*Subscriber) Name() string     { return SubscriberName }
func (*Subscriber) Schema() string   { return "" } // the outbox is a migration
func (*Subscriber) Tables() []string { return nil }

// StreamPrefixes are the streams messages come from (escrows and every
// ledger entry) and the deliveries' own, which ask for redeliveries; the
// runner only moves the checkpoint past other batches.
func (s *Subscriber) StreamPrefixes() []string {
	return append([]string{"escrow-", webhook.StreamKind + "-"}, projector.EntryStreamPrefixes()...)
}

// Apply enqueues the messages of events within the runner's transaction.
//
// The runner commits it asynchronously (no wait for the WAL flush), as every
// projection batch. A database crash can then lose the last moments of the
// subscriber's progress, but never its consistency: checkpoint and messages
// are lost together, the events are read again, and their messages get the
// same ids. A message delivered before the crash may then be delivered
// again, which at-least-once allows.
//
// With Handoff the batch commits synchronously when it leased anything:
// an attempt's number must survive a database crash before the attempt
// is made, or the next lease would reuse it (as a lease's commit).
func (s *Subscriber) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, s, tx, events)
}

// Plan queues the batch's enqueue and redeliveries on b (projector.Planner),
// so that the runner sends them with the checkpoint move in one round trip.
// What the enqueue leased is learnt from the batch's results and handed
// over, or its room given back, when the runner reports the commit
// (Committed).
func (s *Subscriber) Plan(ctx context.Context, _ projector.Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	s.finishHandoff(false) // a batch whose commit was never reported
	if err := queueRedeliveries(b, events); err != nil {
		return nil, err
	}
	msgs, err := s.Messages(ctx, events)
	if err != nil || len(msgs) == 0 {
		return nil, err
	}
	msgs = distinctMessages(msgs)
	var take []bool
	var lease time.Duration
	if s.Handoff != nil {
		take, lease = s.Handoff.reserve(msgs)
	}
	stored, err := sealBodies(ctx, s.Sealer, msgs)
	if err != nil {
		return nil, err
	}
	s.pending = &pendingEnqueue{msgs: msgs, take: take, res: queueEnqueue(b, msgs, stored, take, lease)}
	return nil, nil
}

// pendingEnqueue is the enqueue of the batch being applied, until the
// runner reports its commit.
type pendingEnqueue struct {
	msgs []Message
	take []bool
	res  *enqueued
}

// Committed hands the batch's leased attempts over to Handoff when the
// batch committed, and gives back the room of what it did not lease (all of
// it when the batch did not commit). An ambiguous commit that did commit
// leaves its attempts to their lease: delivered a lease later, never twice.
func (s *Subscriber) Committed(ok bool) { s.finishHandoff(ok) }

func (s *Subscriber) finishHandoff(committed bool) {
	p := s.pending
	s.pending = nil
	if p == nil || s.Handoff == nil {
		return
	}
	var leased []leasedAttempt
	if committed {
		leased = p.res.leased
	}
	got := make(map[uuid.UUID]bool, len(leased))
	for _, c := range leased {
		got[c.ID] = true
	}
	var back []string
	for i, m := range p.msgs {
		if p.take != nil && p.take[i] && !got[m.ID] {
			back = append(back, m.MerchantID)
		}
	}
	s.Handoff.unreserve(back)
	if len(leased) > 0 {
		s.Handoff.handOver(leased)
	}
}

// queueRedeliveries queues on b the redeliveries asked in the deliveries'
// own streams (an escrow's stream holds the same requests for its
// timeline), and a wake-up for the dispatchers when there are any.
func queueRedeliveries(b *pgx.Batch, events []eventstore.RecordedEvent) error {
	n := 0
	for _, re := range events {
		if prefix, _, _ := strings.Cut(re.Stream, "-"); prefix != webhook.StreamKind {
			continue
		}
		ev, err := webhook.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return fmt.Errorf("%s@%d: %w", re.Stream, re.Revision, err)
		}
		if r, ok := ev.(webhook.RedeliveryRequested); ok {
			id, err := uuid.Parse(r.DeliveryID)
			if err != nil {
				continue // no delivery has that id: nothing to deliver again
			}
			b.Queue(redeliverQuery, id)
			n++
		}
	}
	if n > 0 {
		b.Queue(`SELECT pg_notify($1, '')`, notifyChannel)
	}
	return nil
}

// Messages maps events, in order, to their messages.
func (s *Subscriber) Messages(ctx context.Context, events []eventstore.RecordedEvent) ([]Message, error) {
	var out []Message
	for _, re := range events {
		var (
			entry ledger.Entry
			ok    bool
			err   error
		)
		if prefix, _, _ := strings.Cut(re.Stream, "-"); prefix == "escrow" {
			var msgs []Message
			var ev domain.Event
			if msgs, ev, err = s.escrowMessages(ctx, re); err != nil {
				return nil, fmt.Errorf("%s@%d: %w", re.Stream, re.Revision, err)
			}
			out = append(out, msgs...)
			entry, ok = ev.(ledger.Entry) // decoded once for both
		} else if entry, ok, err = projector.DecodeEntry(re); err != nil {
			return nil, fmt.Errorf("%s@%d: %w", re.Stream, re.Revision, err)
		}
		if ok {
			msgs, err := PaymentMessages(entry.Ledger(), re.RecordedAt)
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
		}
	}
	return out, nil
}

// escrowMessages folds the escrow up to the event (from the store, never
// from a read model that may lag) and maps the change.
// It also returns the decoded event.
func (s *Subscriber) escrowMessages(ctx context.Context, re eventstore.RecordedEvent) ([]Message, domain.Event, error) {
	ev, err := escrow.Registry.Decode(re.Type, re.Data)
	if err != nil {
		return nil, nil, err
	}
	before, err := s.escrowAt(ctx, re.Stream, int64(re.Revision)-1)
	if err != nil {
		return nil, ev, err
	}
	after := escrow.Apply(before, ev)
	s.remember(re.Stream, foldedEscrow{state: after, rev: int64(re.Revision)})
	if len(EscrowEvents(ev, before, after)) == 0 {
		return nil, ev, nil // nothing announced: no category to look up
	}
	var cat *view.Category
	if id := after.Terms.CategoryID; id != "" && s.Category != nil {
		if cat, err = s.Category(ctx, id); err != nil {
			return nil, ev, err
		}
	}
	msgs, err := EscrowMessages(re.ID, ev, before, after, cat, re.RecordedAt)
	return msgs, ev, err
}

// escrowAt is the escrow folded up to revision rev (-1: before its first
// event). The cache usually holds exactly that (the previous event of the
// stream); a replayed batch or a cold start reads from the store.
func (s *Subscriber) escrowAt(ctx context.Context, stream string, rev int64) (escrow.State, error) {
	if rev < 0 {
		return escrow.State{}, nil
	}
	s.mu.Lock()
	f, ok := s.escrows[stream]
	s.mu.Unlock()
	if !ok || f.rev > rev {
		f = foldedEscrow{rev: -1}
	}
	for f.rev < rev {
		events, err := s.store.ReadStream(ctx, stream, uint64(f.rev+1), int(rev-f.rev))
		if err != nil {
			return f.state, err
		}
		if len(events) == 0 {
			return f.state, fmt.Errorf("webhooks: %s has no revision %d", stream, f.rev+1)
		}
		for _, e := range events {
			ev, err := escrow.Registry.Decode(e.Type, e.Data)
			if err != nil {
				return f.state, err
			}
			f.state, f.rev = escrow.Apply(f.state, ev), int64(e.Revision)
		}
	}
	return f.state, nil
}

func (s *Subscriber) remember(stream string, f foldedEscrow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.escrows == nil || len(s.escrows) >= maxCachedEscrows {
		s.escrows = map[string]foldedEscrow{}
	}
	s.escrows[stream] = f
}

// Install records where a new subscriber starts: the log's head when it is
// first installed, so that turning webhooks on for an existing log sends
// what happens from then on instead of replaying years of history. Once the
// checkpoint exists Install does nothing, so a restart resumes where the
// subscriber stopped. Events committing after the head was read have later
// positions, so none falls between the head and the checkpoint.
func Install(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool) (eventstore.Position, error) {
	head, err := store.Head(ctx)
	if err != nil {
		return head, err
	}
	_, err = pool.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_pos, prepare_pos)
		VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`, SubscriberName, int64(head.Commit), int64(head.Prepare))
	return head, err
}
