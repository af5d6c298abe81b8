package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
)

// batchStore lets the application decide as it does in service (the
// domain's rules, the engine's expected revisions) while its appends reach
// the event store in large batches: Append checks each expectation against
// the revisions it has accepted, queues the events and answers at once;
// every flushAt events the queue goes to the store in one Append, one
// StreamAppend per stream (events of several commands to one stream are
// joined, expecting the revision before the first). A read of the store
// first flushes the queue. Only for a store that nothing else writes.
type batchStore struct {
	eventstore.Store
	flushAt int

	mu      sync.Mutex
	revs    map[string]int64 // accepted revision per stream
	pending []eventstore.StreamAppend
	index   map[string]int // stream -> its place in pending
	queued  int
	flushed atomic.Int64 // events written to the store
	err     error        // the first failed flush: every later call fails
}

func newBatchStore(s eventstore.Store, flushAt int) *batchStore {
	return &batchStore{Store: s, flushAt: flushAt, revs: map[string]int64{}, index: map[string]int{}}
}

func (s *batchStore) revision(stream string) int64 {
	if r, ok := s.revs[stream]; ok {
		return r
	}
	return -1
}

func (s *batchStore) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return eventstore.AppendResult{}, s.err
	}
	for _, a := range appends {
		cur := s.revision(a.Stream)
		if a.Expected != eventstore.Any && int64(a.Expected) != cur {
			return eventstore.AppendResult{}, &eventstore.ConcurrencyError{Stream: a.Stream, Expected: a.Expected, Actual: cur}
		}
	}
	res := eventstore.AppendResult{Revisions: map[string]uint64{}}
	for _, a := range appends {
		cur := s.revision(a.Stream)
		if len(a.Events) == 0 {
			if cur >= 0 {
				res.Revisions[a.Stream] = uint64(cur)
			}
			continue
		}
		if i, ok := s.index[a.Stream]; ok {
			s.pending[i].Events = append(s.pending[i].Events, a.Events...)
		} else {
			exp := eventstore.NoStream
			if cur >= 0 {
				exp = eventstore.Exact(uint64(cur))
			}
			s.index[a.Stream] = len(s.pending)
			s.pending = append(s.pending, eventstore.StreamAppend{Stream: a.Stream, Expected: exp,
				Events: append([]eventstore.EventData(nil), a.Events...)})
		}
		cur += int64(len(a.Events))
		s.revs[a.Stream] = cur
		res.Revisions[a.Stream] = uint64(cur)
		s.queued += len(a.Events)
	}
	if s.queued >= s.flushAt {
		s.flushLocked(ctx)
	}
	return res, s.err
}

func (s *batchStore) flushLocked(ctx context.Context) {
	if s.queued == 0 || s.err != nil {
		return
	}
	if _, err := s.Store.Append(ctx, s.pending...); err != nil {
		s.err = fmt.Errorf("batch store flush: %w", err)
		return
	}
	s.flushed.Add(int64(s.queued))
	s.pending, s.index, s.queued = nil, map[string]int{}, 0
}

// Flush writes every queued event.
func (s *batchStore) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked(ctx)
	return s.err
}

func (s *batchStore) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	if err := s.Flush(ctx); err != nil {
		return nil, err
	}
	return s.Store.ReadStream(ctx, stream, from, limit)
}

// scaleGen writes one merchant's history through app.Service over a
// batchStore: escrow lifecycles (create, pay from the wallet, confirm),
// each buyer topped up once and paying for scalePerBuyer of them, sold by
// scaleSellers sellers in turn.
type scaleGen struct {
	bs      *batchStore
	svc     *app.Service
	actor   app.Actor
	keys    []app.IssuedKey // the merchant's keys, digested as the API does
	sellers []string
	buyers  atomic.Int64
}

const (
	scaleSellers     = 16
	scaleEscrowNaira = 1000
	// scaleBuyerFunds is each buyer's top-up; scalePerBuyer lifecycles of
	// 1,025 naira (amount and the buyer's 2.5% fee) fit in it.
	scaleBuyerFunds = 100000
	scalePerBuyer   = 97
	scaleWorkers    = 4
)

// newScaleGen creates the merchant and its sellers.
func newScaleGen(tb testing.TB, store eventstore.Store) *scaleGen {
	tb.Helper()
	ctx := context.Background()
	g := &scaleGen{bs: newBatchStore(store, 20000)}
	g.svc = app.NewService(app.NewEngine(g.bs, 200000))
	m, err := g.svc.CreateMerchant(ctx, "Scale Shop", true, "NG", httpapi.KeyDigest)
	if err != nil {
		tb.Fatal(err)
	}
	g.actor = app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	g.keys = m.Keys
	for i := range scaleSellers {
		g.sellers = append(g.sellers, g.customer(tb, "seller", int64(i)))
	}
	g.buyers.Store(scaleSellers)
	return g
}

func (g *scaleGen) customer(tb testing.TB, tag string, i int64) string {
	tb.Helper()
	id, _, err := g.svc.CreateCustomer(context.Background(), g.actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
		Email: fmt.Sprintf("%s%d@scale.example", tag, i), Phone: fmt.Sprintf("080%08d", i)})
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// written is the number of events appended so far (queued included).
func (g *scaleGen) written() int64 {
	g.bs.mu.Lock()
	defer g.bs.mu.Unlock()
	return g.bs.flushed.Load() + int64(g.bs.queued)
}

// fill writes lifecycles until the store holds at least events events,
// all of them flushed when it returns. It goes in rounds: each worker
// tops up a new buyer and creates scalePerBuyer escrows for it, then pays
// them all, then confirms them all, the queue flushed between the steps.
// That keeps the log in the order the application wrote it where it
// matters: the batchStore moves a stream's events up to the stream's
// first place in its batch, and within a step no payment or escrow stream
// (the ledger's entries) is written twice; wallets are, but only their
// own order counts.
func (g *scaleGen) fill(tb testing.TB, events int64) {
	tb.Helper()
	ctx := context.Background()
	perms := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	step := func(each func(w int) error) {
		eg, _ := errgroup.WithContext(ctx)
		for w := range scaleWorkers {
			eg.Go(func() error { return each(w) })
		}
		if err := eg.Wait(); err != nil {
			tb.Fatal(err)
		}
		if err := g.bs.Flush(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	for g.written() < events {
		buyers := make([]string, scaleWorkers)
		refs := make([]int64, scaleWorkers)
		escrows := make([][]escrow.State, scaleWorkers)
		step(func(w int) error {
			refs[w] = g.buyers.Add(1)
			buyers[w] = g.customer(tb, "buyer", refs[w])
			_, _, err := g.svc.TopUp(ctx, g.actor, buyers[w], money.Naira(scaleBuyerFunds))
			return err
		})
		step(func(w int) error {
			for k := range scalePerBuyer {
				seller := g.sellers[(int(refs[w])+k)%len(g.sellers)]
				res, err := g.svc.CreateEscrow(ctx, g.actor, seller, escrow.Draft{Amount: money.Naira(scaleEscrowNaira),
					Purpose: "Scale lifecycle", WhoPays: string(escrow.Buyer)})
				if err != nil {
					return fmt.Errorf("create: %w", err)
				}
				escrows[w] = append(escrows[w], res.Escrow)
			}
			return nil
		})
		step(func(w int) error {
			for k, e := range escrows[w] {
				if _, err := g.svc.PayEscrows(ctx, g.actor, buyers[w], perms, app.EscrowPayment{
					Reference: fmt.Sprintf("SCALE-%d-%d", refs[w], k), Amount: e.Due(), EscrowIDs: []string{e.ID}}); err != nil {
					return fmt.Errorf("pay: %w", err)
				}
			}
			return nil
		})
		step(func(w int) error {
			for _, e := range escrows[w] {
				if _, err := g.svc.ConfirmEscrow(ctx, g.actor, buyers[w], e.ID); err != nil {
					return fmt.Errorf("confirm: %w", err)
				}
			}
			return nil
		})
	}
}
