package app

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/gateway"
)

// listing is a Find that lists refs of actor's merchant, whatever the
// time (the read model's own filter is tested with the ledger projector),
// in pages after the reference asked (refs in order).
func listing(actor Actor, refs ...string) func(context.Context, PayoutRef, time.Time, int) ([]PayoutRef, error) {
	return func(_ context.Context, after PayoutRef, _ time.Time, limit int) ([]PayoutRef, error) {
		var out []PayoutRef
		for i, r := range refs {
			if after.Reference != "" && (after.Reference == r || i < indexOf(refs, after.Reference)) {
				continue
			}
			if len(out) < limit {
				out = append(out, PayoutRef{MerchantID: actor.MerchantID, Environment: actor.Environment, Reference: r})
			}
		}
		return out, nil
	}
}

func indexOf(refs []string, ref string) int {
	for i, r := range refs {
		if r == ref {
			return i
		}
	}
	return -1
}

func recordOf(t *testing.T, svc *Service, actor Actor, ref string) payment.State {
	t.Helper()
	st, _, err := Load(context.Background(), svc.Engine, PaymentKind, payment.StreamID(actor.MerchantID, actor.Environment, ref))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A withdrawal whose provider did not answer stays debited and pending;
// the resumer (on another instance) asks again, records the payout and
// signs its events as the resumer. The customer is debited once.
func TestResumerFinishesAWithdrawalLeftDebited(t *testing.T) {
	ctx := context.Background()
	p := unansweredOnce()
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPayoutUnanswered {
		t.Fatalf("verify: %v, want ErrPayoutUnanswered", err)
	}
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-1")}
	settled, err := r.Round(ctx)
	if err != nil || settled != 1 {
		t.Fatalf("round settled %d (%v), want 1", settled, err)
	}
	if st := recordOf(t, a, actor, "wd-1"); st.Phase != payment.Done || st.Record.Status != ledger.Success {
		t.Fatalf("withdrawal %s %s, want done, success", st.Phase, st.Record.Status)
	}
	if calls := p.calls(); len(calls) != 2 {
		t.Fatalf("provider asked %d times, want twice (unanswered, then the resumer)", len(calls))
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
	events, err := a.Engine.Store().ReadStream(ctx, "payment-"+payment.StreamID(actor.MerchantID, actor.Environment, "wd-1"), 0, 100)
	if err != nil || len(events) == 0 {
		t.Fatalf("read %d events: %v", len(events), err)
	}
	var meta domain.Meta
	if err := json.Unmarshal(events[len(events)-1].Metadata, &meta); err != nil || meta.Actor != ResumerAgent {
		t.Fatalf("last event's actor %q (%v), want %q", meta.Actor, err, ResumerAgent)
	}
	// A second round finds nothing left to do.
	if settled, err := r.Round(ctx); err != nil || settled != 0 || len(p.calls()) != 2 {
		t.Fatalf("second round settled %d (%v), provider asked %d times", settled, err, len(p.calls()))
	}
}

// The resumer never executes a withdrawal staged and not verified (it is
// not the customer's consent), and skips one whose lease a verify holds
// while that verify asks the provider.
func TestResumerLeavesStagedAndLeasedWithdrawalsAlone(t *testing.T) {
	ctx := context.Background()
	p := &payoutProvider{started: make(chan struct{}, 2), release: make(chan struct{})}
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-staged")
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-staged")}
	if settled, err := r.Round(ctx); err != nil || settled != 0 {
		t.Fatalf("round on a staged withdrawal settled %d (%v)", settled, err)
	}
	if st := recordOf(t, a, actor, "wd-staged"); st.Phase != payment.Staged || len(p.calls()) != 0 {
		t.Fatalf("staged withdrawal now %s, provider asked %d times", st.Phase, len(p.calls()))
	}
	expectMain(t, a, cid, money.Naira(5000))

	done := make(chan error, 1)
	go func() {
		_, _, err := a.Verify(ctx, actor, cid, allowed, "wd-staged")
		done <- err
	}()
	<-p.started // the verify debited and holds the lease
	if settled, err := r.Round(ctx); err != nil || settled != 0 {
		t.Fatalf("round during the verify's payout settled %d (%v)", settled, err)
	}
	close(p.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	expectPaidOutOnce(t, p, a, cid)
}

// Rounds on two instances racing with verifies of a withdrawal left
// debited: the provider is asked once more, whoever wins, and the customer
// is debited once.
func TestResumersAndVerifiesRacingPayOutOnce(t *testing.T) {
	ctx := context.Background()
	p := unansweredOnce()
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPayoutUnanswered {
		t.Fatalf("verify: %v, want ErrPayoutUnanswered", err)
	}
	ra := &PayoutResumer{Service: a, Find: listing(actor, "wd-1")}
	rb := &PayoutResumer{Service: b, Find: listing(actor, "wd-1")}
	got := raceOnTwo(a, b, 12, func(i int, svc *Service) error {
		switch i % 4 {
		case 0:
			_, err := ra.Round(ctx)
			return err
		case 1:
			_, err := rb.Round(ctx)
			return err
		default:
			rec, _, err := svc.Verify(ctx, actor, cid, allowed, "wd-1")
			if err == nil && rec.Status != ledger.Success && rec.Status != ledger.Pending {
				t.Errorf("verify answered %s", rec.Status)
			}
			if err == payment.ErrPayoutInProgress {
				return nil // lost the lease to a round or another verify
			}
			return err
		}
	})
	if got["ok"] != 12 {
		t.Fatalf("outcomes %v", got)
	}
	if calls := p.calls(); len(calls) != 2 {
		t.Fatalf("provider asked %d times, want twice", len(calls))
	}
	if st := recordOf(t, a, actor, "wd-1"); st.Record.Status != ledger.Success {
		t.Fatalf("withdrawal %s", st.Record.Status)
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
}

// The resumer holds a withdrawal left debited whose customer may no longer
// withdraw (blocked, or the permission taken away), as a verify by that
// customer is refused: an operator stopping a customer must stop the money
// leaving too. Once allowed again, the next round pays it out.
func TestResumerHoldsAWithdrawalTheCustomerMayNoLongerMake(t *testing.T) {
	ctx := context.Background()
	p := unansweredOnce()
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPayoutUnanswered {
		t.Fatalf("verify: %v, want ErrPayoutUnanswered", err)
	}
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-1")}
	operator := Actor{MerchantID: actor.MerchantID, Environment: actor.Environment}
	if _, err := a.SetBlocked(ctx, operator, cid, true, "fraud review"); err != nil {
		t.Fatal(err)
	}
	if settled, err := r.Round(ctx); err != nil || settled != 0 || len(p.calls()) != 1 {
		t.Fatalf("round for a blocked customer settled %d (%v), provider asked %d times, want 0 and once",
			settled, err, len(p.calls()))
	}
	if st := recordOf(t, a, actor, "wd-1"); st.Phase != payment.PayingOut || st.LeaseHolder != "" {
		t.Fatalf("withdrawal of a blocked customer %s, lease %q: want paying out, unleased", st.Phase, st.LeaseHolder)
	}
	if _, err := a.SetBlocked(ctx, operator, cid, false, ""); err != nil {
		t.Fatal(err)
	}
	no, yes := false, true
	if _, err := a.SetPermissions(ctx, operator, cid, nil, nil, &no); err != nil {
		t.Fatal(err)
	}
	if settled, err := r.Round(ctx); err != nil || settled != 0 || len(p.calls()) != 1 {
		t.Fatalf("round for a customer who may not withdraw settled %d (%v), provider asked %d times, want 0 and once",
			settled, err, len(p.calls()))
	}
	if _, err := a.SetPermissions(ctx, operator, cid, nil, nil, &yes); err != nil {
		t.Fatal(err)
	}
	if settled, err := r.Round(ctx); err != nil || settled != 1 || len(p.calls()) != 2 {
		t.Fatalf("round once unblocked settled %d (%v), provider asked %d times, want 1 and twice",
			settled, err, len(p.calls()))
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
}

// stuckProvider never answers for the reference stuck; for any other it
// fails the first call and pays out from then on.
type stuckProvider struct {
	mu    sync.Mutex
	stuck string
	calls map[string]int
}

func (p *stuckProvider) Send(_ context.Context, r ledger.Record, _ string) (payment.PayoutAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[r.Reference]++
	if r.Reference == p.stuck || p.calls[r.Reference] == 1 {
		return payment.PayoutAnswer{}, errors.New("provider timed out")
	}
	return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
}

// Withdrawals a round cannot settle (the provider never answers for them)
// do not hide the ones listed after them: a round pages through every
// withdrawal due, a Batch at a time.
func TestResumerRoundPagesPastWithdrawalsItCannotSettle(t *testing.T) {
	ctx := context.Background()
	p := &stuckProvider{stuck: "wd-stuck", calls: map[string]int{}}
	a, b, _, actor := twoInstances(t)
	for _, svc := range []*Service{a, b} {
		svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: p}
	}
	cid := stageWithdrawals(t, a, actor, "wd-stuck", "wd-2")
	for _, ref := range []string{"wd-stuck", "wd-2"} {
		if _, _, err := a.Verify(ctx, actor, cid, allowed, ref); err != ErrPayoutUnanswered {
			t.Fatalf("verify %s: %v, want ErrPayoutUnanswered", ref, err)
		}
	}
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-stuck", "wd-2"), Batch: 1}
	if settled, err := r.Round(ctx); err != nil || settled != 1 {
		t.Fatalf("round settled %d (%v), want 1: the withdrawal after the stuck one", settled, err)
	}
	if st := recordOf(t, a, actor, "wd-2"); st.Phase != payment.Done || st.Record.Status != ledger.Success {
		t.Fatalf("wd-2 %s %s, want done, success", st.Phase, st.Record.Status)
	}
	if st := recordOf(t, a, actor, "wd-stuck"); st.Phase != payment.PayingOut {
		t.Fatalf("wd-stuck %s, want still paying out", st.Phase)
	}
	expectMain(t, a, cid, money.Naira(5000-2*(1000+50)))
}

// Run's pauses between rounds are drawn between three quarters and five
// quarters of Interval, each anew, so that API processes started together
// drift apart. In a synctest bubble the pauses are measured on its fake
// clock, between the rounds Run actually starts.
func TestResumerPausesAreJittered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 40 * time.Second
		var rounds []time.Time
		r := &PayoutResumer{
			Service:  &Service{Engine: NewEngine(nil, 1)},
			Interval: interval,
			Find: func(context.Context, PayoutRef, time.Time, int) ([]PayoutRef, error) {
				rounds = append(rounds, time.Now())
				return nil, nil
			},
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(100 * interval)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		if len(rounds) < 80 || len(rounds) > 135 {
			t.Fatalf("%d rounds in 100 intervals; want 81 to 134", len(rounds))
		}
		pauses := map[time.Duration]bool{}
		for i := 1; i < len(rounds); i++ {
			p := rounds[i].Sub(rounds[i-1])
			if p < interval*3/4 || p >= interval*5/4 {
				t.Fatalf("pause %d: %s; want within [%s, %s)", i, p, interval*3/4, interval*5/4)
			}
			pauses[p] = true
		}
		// Drawn anew each time: a fixed pause (or one drawn once) gives one
		// value; 80 draws of a float give 80.
		if len(pauses) < len(rounds)/2 {
			t.Fatalf("%d distinct pauses among %d: not drawn for each pause", len(pauses), len(rounds)-1)
		}
	})
}

func TestJittered(t *testing.T) {
	const d = 40 * time.Second
	for _, tc := range []struct {
		u    float64
		want time.Duration
	}{{0, 30 * time.Second}, {0.5, d}, {0.999999, 50*time.Second - 20*time.Microsecond}} {
		if got := jittered(d, tc.u); got != tc.want {
			t.Errorf("jittered(%s, %v) = %s, want %s", d, tc.u, got, tc.want)
		}
	}
}

// blockAfterRead is a store that, once, blocks a customer right after a
// read of that customer's stream: an operator acting between the moment
// the resumer learns the customer may withdraw and its lease's append.
type blockAfterRead struct {
	eventstore.Store
	stream string
	block  func()
	once   sync.Once
}

func (s *blockAfterRead) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	evs, err := s.Store.ReadStream(ctx, stream, from, limit)
	if stream == s.stream {
		s.once.Do(s.block)
	}
	return evs, err
}

// The resumer's "may this customer withdraw" is decided in the append that
// takes the lease, not by a read before it: a block committed between the
// read and that append makes it decide again, and the money stays.
func TestResumerSeesABlockRacingItsLease(t *testing.T) {
	ctx := context.Background()
	p := unansweredOnce()
	a, _, actor, cid := stagedWithdrawal(t, p, "wd-1")
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPayoutUnanswered {
		t.Fatalf("verify: %v, want ErrPayoutUnanswered", err)
	}
	operator := Actor{MerchantID: actor.MerchantID, Environment: actor.Environment}
	store := &blockAfterRead{Store: a.Engine.Store(), stream: CustomerKind.StreamName(cid), block: func() {
		if _, err := a.SetBlocked(ctx, operator, cid, true, "fraud review"); err != nil {
			t.Error(err)
		}
	}}
	b := NewService(NewEngine(store, 100))
	b.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: p}
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-1")}
	if settled, err := r.Round(ctx); err != nil || settled != 0 || len(p.calls()) != 1 {
		t.Fatalf("round racing a block settled %d (%v), provider asked %d times, want 0 and once",
			settled, err, len(p.calls()))
	}
	if st := recordOf(t, a, actor, "wd-1"); st.Phase != payment.PayingOut || st.LeaseHolder != "" {
		t.Fatalf("withdrawal %s, lease %q: want paying out, unleased", st.Phase, st.LeaseHolder)
	}
}

// Reference and Status complete gateway.Payouts: stuckProvider answers every send at
// once, so it is never asked where a payout stands.
func (p *stuckProvider) Reference(w ledger.Record) string { return w.ID }
func (p *stuckProvider) Status(context.Context, ledger.Record) (payment.PayoutAnswer, error) {
	return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
}
