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

// scaleMerchant is the generated store's one merchant: a business, its
// sellers and buyers in the test environment.
type scaleMerchant struct {
	svc     *app.Service
	actor   app.Actor
	sellers []string
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

// fillScaleStore writes about events events of one merchant through
// app.Service over a batchStore: escrow lifecycles (create, pay from the
// wallet, confirm), each buyer topped up once and paying for
// scalePerBuyer of them. It returns the merchant and the number of events
// written; progress, if set, is called after each buyer.
func fillScaleStore(tb testing.TB, store eventstore.Store, events int64, progress func(written int64)) (scaleMerchant, int64) {
	tb.Helper()
	ctx := context.Background()
	bs := newBatchStore(store, 20000)
	svc := app.NewService(app.NewEngine(bs, 200000))
	m, err := svc.CreateMerchant(ctx, "Scale Shop", true, "NG", func(k string) string { return "scale-" + k })
	if err != nil {
		tb.Fatal(err)
	}
	sm := scaleMerchant{svc: svc, actor: app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}}
	newCustomer := func(tag string, i int64) string {
		id, _, err := svc.CreateCustomer(ctx, sm.actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi",
			Email: fmt.Sprintf("%s%d@scale.example", tag, i), Phone: fmt.Sprintf("080%08d", i)})
		if err != nil {
			tb.Fatal(err)
		}
		return id
	}
	for i := range scaleSellers {
		sm.sellers = append(sm.sellers, newCustomer("seller", int64(i)))
	}
	perms := customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}
	var buyers atomic.Int64
	buyers.Store(scaleSellers)
	written := func() int64 {
		bs.mu.Lock()
		defer bs.mu.Unlock()
		return bs.flushed.Load() + int64(bs.queued)
	}
	g, gctx := errgroup.WithContext(ctx)
	for range scaleWorkers {
		g.Go(func() error {
			for gctx.Err() == nil && written() < events {
				n := buyers.Add(1)
				buyer := newCustomer("buyer", n)
				if _, _, err := svc.TopUp(gctx, sm.actor, buyer, money.Naira(scaleBuyerFunds)); err != nil {
					return err
				}
				for k := 0; k < scalePerBuyer && written() < events; k++ {
					seller := sm.sellers[(int(n)+k)%len(sm.sellers)]
					res, err := svc.CreateEscrow(gctx, sm.actor, seller, escrow.Draft{Amount: money.Naira(scaleEscrowNaira),
						Purpose: "Scale lifecycle", WhoPays: string(escrow.Buyer)})
					if err != nil {
						return fmt.Errorf("create: %w", err)
					}
					if _, err := svc.PayEscrows(gctx, sm.actor, buyer, perms, app.EscrowPayment{
						Reference: fmt.Sprintf("SCALE-%d-%d", n, k), Amount: res.Escrow.Due(),
						EscrowIDs: []string{res.Escrow.ID}}); err != nil {
						return fmt.Errorf("pay: %w", err)
					}
					if _, err := svc.ConfirmEscrow(gctx, sm.actor, buyer, res.Escrow.ID); err != nil {
						return fmt.Errorf("confirm: %w", err)
					}
				}
				if progress != nil {
					progress(written())
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	if err := bs.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	return sm, bs.flushed.Load()
}
