package app

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
)

// asyncRail accepts every payout (pending) and answers Status with what
// outcome says for the record id (unknown until set), counting calls.
type asyncRail struct {
	mu      sync.Mutex
	sends   map[string]int
	polls   map[string]int
	outcome map[string]payment.PayoutAnswer
}

func newAsyncRail() *asyncRail {
	return &asyncRail{sends: map[string]int{}, polls: map[string]int{}, outcome: map[string]payment.PayoutAnswer{}}
}

func (r *asyncRail) Reference(w ledger.Record) string { return "wd_" + w.ID }

func (r *asyncRail) Send(_ context.Context, w ledger.Record, _ string) (payment.PayoutAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends[w.ID]++
	return payment.PayoutAnswer{Status: payment.ProviderPending, Transfer: "TRF_" + w.ID}, nil
}

func (r *asyncRail) Status(_ context.Context, w ledger.Record) (payment.PayoutAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.polls[w.ID]++
	if a, ok := r.outcome[w.ID]; ok {
		return a, nil
	}
	return payment.PayoutAnswer{}, errors.New("provider timed out")
}

func (r *asyncRail) set(id string, a payment.PayoutAnswer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcome[id] = a
}

func (r *asyncRail) counts(id string) (sends, polls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sends[id], r.polls[id]
}

// clock is a settable time for both instances.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.at = c.at.Add(d) }

// acceptedWithdrawal is a withdrawal of 1,000 (fee 50) verified on a and
// accepted by rail, the customer holding 5,000 before it; a and b run on
// clk.
func acceptedWithdrawal(t *testing.T, ref string) (a, b *Service, actor Actor, cid string, rail *asyncRail, clk *clock, rec ledger.Record) {
	t.Helper()
	rail = newAsyncRail()
	a, b, actor, cid = stagedWithdrawal(t, rail, ref)
	clk = &clock{at: time.Now().UTC()}
	a.Engine.Now, b.Engine.Now = clk.now, clk.now
	rec, _, err := a.Verify(context.Background(), actor, cid, allowed, ref)
	if err != nil || rec.Status != ledger.Pending {
		t.Fatalf("verify: %s, %v; want pending", rec.Status, err)
	}
	if st := recordOf(t, b, actor, ref); !st.AwaitingOutcome() || st.Transfer != "TRF_"+rec.ID {
		t.Fatalf("after verify: phase %s accepted %v transfer %q", st.Phase, st.Accepted, st.Transfer)
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
	return a, b, actor, cid, rail, clk, rec
}

// An accepted payout stays pending: verifying again neither sends it again
// nor asks the provider; the resumer asks only once it has waited the poll
// delay, records nothing while the provider says pending, and returns the
// debit once when it says failed.
func TestAcceptedPayoutIsPolledAfterTheDelay(t *testing.T) {
	ctx := context.Background()
	a, b, actor, cid, rail, clk, rec := acceptedWithdrawal(t, "wd-poll")
	if again, _, err := b.Verify(ctx, actor, cid, allowed, "wd-poll"); err != nil || again.Status != ledger.Pending {
		t.Fatalf("verify again: %s, %v", again.Status, err)
	}
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-poll")}
	if settled, err := r.Round(ctx); err != nil || settled != 0 {
		t.Fatalf("round before the delay settled %d (%v)", settled, err)
	}
	if sends, polls := rail.counts(rec.ID); sends != 1 || polls != 0 {
		t.Fatalf("before the delay: sent %d, polled %d; want 1, 0", sends, polls)
	}
	clk.add(payment.PayoutPollAfter)
	rail.set(rec.ID, payment.PayoutAnswer{Status: payment.ProviderPending})
	if settled, err := r.Round(ctx); err != nil || settled != 0 {
		t.Fatalf("round on a pending payout settled %d (%v)", settled, err)
	}
	rail.set(rec.ID, payment.PayoutAnswer{Status: payment.ProviderFailed, Reason: "Could not credit account"})
	if settled, err := r.Round(ctx); err != nil || settled != 1 {
		t.Fatalf("round on a failed payout settled %d (%v), want 1", settled, err)
	}
	if st := recordOf(t, a, actor, "wd-poll"); st.Phase != payment.Done || st.Record.Status != ledger.Failed {
		t.Fatalf("withdrawal %s %s, want done, failed", st.Phase, st.Record.Status)
	}
	expectMain(t, a, cid, money.Naira(5000))
	if settled, err := r.Round(ctx); err != nil || settled != 0 {
		t.Fatalf("round after the outcome settled %d (%v)", settled, err)
	}
	if sends, polls := rail.counts(rec.ID); sends != 1 || polls != 2 {
		t.Fatalf("sent %d, polled %d; want 1, 2 (pending, failed)", sends, polls)
	}
	expectMain(t, a, cid, money.Naira(5000))
}

// The poll delay is the service's: a shorter one polls sooner.
func TestPayoutPollDelayIsConfigurable(t *testing.T) {
	ctx := context.Background()
	_, b, actor, _, rail, clk, rec := acceptedWithdrawal(t, "wd-soon")
	b.PayoutPollAfter = time.Second
	rail.set(rec.ID, payment.PayoutAnswer{Status: payment.ProviderSucceeded})
	r := &PayoutResumer{Service: b, Find: listing(actor, "wd-soon")}
	if settled, err := r.Round(ctx); err != nil || settled != 0 {
		t.Fatalf("round within the delay settled %d (%v)", settled, err)
	}
	clk.add(time.Second)
	if settled, err := r.Round(ctx); err != nil || settled != 1 {
		t.Fatalf("round after the delay settled %d (%v)", settled, err)
	}
	if st := recordOf(t, b, actor, "wd-soon"); st.Record.Status != ledger.Success {
		t.Fatalf("status %s, want success", st.Record.Status)
	}
}

// The provider's events (however many, on two instances at once) and the
// poll race to settle a reversed payout: the debit returns once.
func TestProviderEventsAndPollReturnTheDebitOnce(t *testing.T) {
	ctx := context.Background()
	a, b, actor, cid, rail, clk, rec := acceptedWithdrawal(t, "wd-race")
	clk.add(payment.PayoutPollAfter)
	rail.set(rec.ID, payment.PayoutAnswer{Status: payment.ProviderReversed, Reason: "returned"})
	outcomes := raceOnTwo(a, b, 8, func(i int, svc *Service) error {
		if i%4 == 3 {
			_, _, err := svc.PollPayout(ctx, actor.MerchantID, actor.Environment, "wd-race", ResumerAgent, payment.PayoutPollAfter)
			return err
		}
		_, err := svc.SettleProviderPayout(ctx, actor.Environment, "wd_"+rec.ID, "provider-events")
		return err
	})
	if outcomes["ok"] != 8 {
		t.Fatalf("outcomes %v, want 8 ok", outcomes)
	}
	expectMain(t, a, cid, money.Naira(5000))
	if st := recordOf(t, a, actor, "wd-race"); st.Record.Status != ledger.Reversed {
		t.Fatalf("status %s, want reversed", st.Record.Status)
	}
	returned := 0
	for _, typ := range streamTypes(t, a.Engine.Store(), PaymentKind.StreamName(payment.StreamID(actor.MerchantID, actor.Environment, "wd-race"))) {
		if typ == "payment.payout_reversed" || typ == "payment.payout_failed" {
			returned++
		}
	}
	if returned != 1 {
		t.Fatalf("the debit was returned %d times", returned)
	}
}

// A payout the provider reverses after its success returns the debit once;
// the provider's words for a payout nobody here made move nothing.
func TestReversalAfterSuccessAndUnknownReferences(t *testing.T) {
	ctx := context.Background()
	a, b, actor, cid, rail, _, rec := acceptedWithdrawal(t, "wd-late")
	rail.set(rec.ID, payment.PayoutAnswer{Status: payment.ProviderSucceeded})
	if got, err := a.SettleProviderPayout(ctx, actor.Environment, "wd_"+rec.ID, "provider-events"); err != nil || got.Status != ledger.Success {
		t.Fatalf("success event: %s, %v", got.Status, err)
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
	rail.set(rec.ID, payment.PayoutAnswer{Status: payment.ProviderReversed})
	_, before := rail.counts(rec.ID)
	for _, svc := range []*Service{a, b, a} {
		if got, err := svc.SettleProviderPayout(ctx, actor.Environment, "wd_"+rec.ID, "provider-events"); err != nil || got.Status != ledger.Reversed {
			t.Fatalf("reversal event: %s, %v", got.Status, err)
		}
	}
	expectMain(t, a, cid, money.Naira(5000))
	if _, polls := rail.counts(rec.ID); polls != before+1 {
		t.Fatalf("asked %d times after the reversal, want once: a returned payout is not asked again", polls-before)
	}
	if _, err := a.SettleProviderPayout(ctx, actor.Environment, "wd_unknown", "provider-events"); !errors.Is(err, ErrUnknownPayout) {
		t.Fatalf("unknown reference: %v", err)
	}
	// The link is per environment: live has no such payout.
	if _, err := a.SettleProviderPayout(ctx, "live", "wd_"+rec.ID, "provider-events"); !errors.Is(err, ErrUnknownPayout) {
		t.Fatalf("other environment: %v", err)
	}
}

// A provider that does not answer a poll decides nothing: the debit
// stands and the payout stays pending.
func TestUnansweredPollDecidesNothing(t *testing.T) {
	ctx := context.Background()
	a, _, actor, cid, _, clk, rec := acceptedWithdrawal(t, "wd-silent")
	clk.add(payment.PayoutPollAfter)
	if _, _, err := a.PollPayout(ctx, actor.MerchantID, actor.Environment, "wd-silent", ResumerAgent, payment.PayoutPollAfter); !errors.Is(err, ErrPayoutUnanswered) {
		t.Fatalf("poll: %v, want ErrPayoutUnanswered", err)
	}
	if st := recordOf(t, a, actor, "wd-silent"); !st.AwaitingOutcome() || st.Record.ID != rec.ID {
		t.Fatalf("phase %s accepted %v", st.Phase, st.Accepted)
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
}
