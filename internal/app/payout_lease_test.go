package app

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// payoutProvider records every record id it is asked to pay. A call blocks
// until release is closed (when set); with hangFirst the first one blocks
// until unhang is closed (or its context ends) and then fails; answer
// decides what a call returns.
type payoutProvider struct {
	mu        sync.Mutex
	asked     []string
	left      []time.Duration   // per call, what its context had left of its deadline (0: none)
	ctxs      []context.Context // per call, its context
	started   chan struct{}     // one send per call, when set
	release   chan struct{}
	hangFirst bool
	unhang    chan struct{}
	answer    func(call int) (payment.PayoutAnswer, error)
	// gate, when set, holds call n until the channel it returns is closed.
	gate func(call int) <-chan struct{}
}

func (p *payoutProvider) Send(ctx context.Context, w ledger.Record, _ string) (payment.PayoutAnswer, error) {
	p.mu.Lock()
	p.asked = append(p.asked, w.ID)
	var left time.Duration
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	p.left = append(p.left, left)
	p.ctxs = append(p.ctxs, ctx)
	call := len(p.asked)
	p.mu.Unlock()
	if p.started != nil {
		select { // a call too many must not hang the test, only fail it
		case p.started <- struct{}{}:
		default:
		}
	}
	if call == 1 && p.hangFirst {
		select {
		case <-p.unhang:
			return payment.PayoutAnswer{}, errors.New("the provider never answered")
		case <-ctx.Done():
			return payment.PayoutAnswer{}, ctx.Err()
		}
	}
	if p.release != nil {
		select {
		case <-p.release:
		case <-ctx.Done():
			return payment.PayoutAnswer{}, ctx.Err()
		}
	}
	if p.gate != nil {
		select {
		case <-p.gate(call):
		case <-ctx.Done():
			return payment.PayoutAnswer{}, ctx.Err()
		}
	}
	if p.answer != nil {
		return p.answer(call)
	}
	return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
}

// unansweredOnce is a provider that does not answer the first payout (an
// error: the payout is unknown) and pays every later one.
func unansweredOnce() *payoutProvider {
	return &payoutProvider{answer: func(call int) (payment.PayoutAnswer, error) {
		if call == 1 {
			return payment.PayoutAnswer{}, errors.New("provider timed out")
		}
		return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
	}}
}

// deadlines is what each call's context had left of its deadline.
func (p *payoutProvider) deadlines() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.left...)
}

func (p *payoutProvider) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// stagedWithdrawal gives two instances paying out through p and a customer
// topped up with 5,000 whose withdrawal of 1,000 (fee 50) is staged as ref.
func stagedWithdrawal(t *testing.T, p gateway.Payouts, ref string) (a, b *Service, actor Actor, cid string) {
	t.Helper()
	a, b, _, actor = twoInstances(t)
	for _, svc := range []*Service{a, b} {
		svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: p}
	}
	return a, b, actor, stageWithdrawals(t, a, actor, ref)
}

// stageWithdrawals creates a customer topped up with 5,000 on svc and stages
// a withdrawal of 1,000 (fee 50) for each of refs.
func stageWithdrawals(t *testing.T, svc *Service, actor Actor, refs ...string) (cid string) {
	t.Helper()
	ctx := context.Background()
	cid, _, err := svc.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.TopUp(ctx, actor, cid, money.Naira(5000)); err != nil {
		t.Fatal(err)
	}
	account := domaintest.NUBAN(t, "058", "12", false)
	for _, ref := range refs {
		in := IntentRequest{Reference: ref, Type: ledger.Withdrawal, Amount: money.Naira(1000),
			Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058"}}
		if _, err := svc.CreateIntent(ctx, actor, cid, allowed, in); err != nil {
			t.Fatal(err)
		}
	}
	return cid
}

// expectPaidOutOnce: the provider was asked once and the customer debited
// once (the 1,000 withdrawn and the 50 fee, of 5,000).
func expectPaidOutOnce(t *testing.T, p *payoutProvider, svc *Service, cid string) {
	t.Helper()
	if calls := p.calls(); len(calls) != 1 {
		t.Fatalf("provider asked %d times (%v), want once", len(calls), calls)
	}
	expectMain(t, svc, cid, money.Naira(5000-1000-50))
}

func expectMain(t *testing.T, svc *Service, cid string, want money.Amount) {
	t.Helper()
	w, _, err := Load(context.Background(), svc.Engine, WalletKind, cid)
	if err != nil || w.Main != want {
		t.Fatalf("main %s (%v), want %s", w.Main, err, want)
	}
}

// Verifies of one withdrawal racing on two instances while the provider is
// still answering the first: the provider is asked once, the customer is
// debited once, and every other verify answers that the payout is in
// progress, until it is over; then they answer its outcome.
func TestRacingVerifiesAskTheProviderOnce(t *testing.T) {
	ctx := context.Background()
	p := &payoutProvider{started: make(chan struct{}, 1), release: make(chan struct{})}
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")

	first := make(chan error, 1)
	go func() {
		_, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1")
		first <- err
	}()
	<-p.started // the first verify has debited and is asking the provider
	const n = 10
	got := raceOnTwo(a, b, n, func(_ int, svc *Service) error {
		_, _, err := svc.Verify(ctx, actor, cid, allowed, "wd-1")
		return err
	})
	if want := map[string]int{"unavailable: The payout is in progress; verify again later": n}; !reflect.DeepEqual(got, want) {
		t.Fatalf("verifies during the payout: %v, want %v", got, want)
	}
	close(p.release)
	if err := <-first; err != nil {
		t.Fatalf("the verify that paid out: %v", err)
	}
	got = raceOnTwo(a, b, n, func(_ int, svc *Service) error {
		rec, _, err := svc.Verify(ctx, actor, cid, allowed, "wd-1")
		if err == nil && rec.Status != ledger.Success {
			return errors.New("status " + string(rec.Status))
		}
		return err
	})
	if want := map[string]int{"ok": n}; !reflect.DeepEqual(got, want) {
		t.Fatalf("verifies after the payout: %v, want %v", got, want)
	}
	expectPaidOutOnce(t, p, b, cid)
}

// A verify that vanished while asking the provider (a crash) holds the
// lease only until it runs out: then one verify takes it and asks again.
func TestAnAbandonedPayoutLeaseRunsOut(t *testing.T) {
	ctx := context.Background()
	p := &payoutProvider{started: make(chan struct{}, 3), hangFirst: true, unhang: make(chan struct{})}
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	t0 := time.Now().UTC()
	a.Engine.Now = func() time.Time { return t0 }
	vanished := make(chan struct{})
	go func() {
		defer close(vanished)
		a.Verify(ctx, actor, cid, allowed, "wd-1") //nolint:errcheck // the verify that "vanished" inside its call
	}()
	<-p.started

	b.Engine.Now = func() time.Time { return t0.Add(payment.PayoutLease - time.Second) }
	if _, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1"); err != payment.ErrPayoutInProgress {
		t.Fatalf("verify inside the lease: %v", err)
	}
	b.Engine.Now = func() time.Time { return t0.Add(payment.PayoutLease) }
	rec, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("verify after the lease ran out: %+v, %v", rec, err)
	}
	close(p.unhang)
	<-vanished
	if calls := p.calls(); len(calls) != 2 || calls[0] != calls[1] || calls[0] != rec.ID {
		t.Fatalf("provider asked for %v, want record %s twice (the vanished call and the one after its lease)", calls, rec.ID)
	}
	expectMain(t, b, cid, money.Naira(5000-1000-50))
	if st, _, err := Load(ctx, b.Engine, PaymentKind, payment.StreamID(actor.MerchantID, actor.Environment, "wd-1")); err != nil ||
		st.Phase != payment.Done || st.Record.Status != ledger.Success {
		t.Fatalf("after the vanished call failed late: phase %q status %q (%v); the payout must stay completed", st.Phase, st.Record.Status, err)
	}
}

// A verify whose lease ran out while its call was still out, and which
// another verify took, must not record its late answer: here the provider
// refused the first call and paid on the second, and had the first answer
// been recorded too, the whole debit would have gone back to the customer
// while the payout was made. Only the lease's holder records.
func TestALateAnswerAfterTheLeaseWasTakenIsNotRecorded(t *testing.T) {
	ctx := context.Background()
	gates := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	p := &payoutProvider{started: make(chan struct{}, 2),
		gate: func(call int) <-chan struct{} { return gates[call] },
		answer: func(call int) (payment.PayoutAnswer, error) {
			if call == 1 {
				return payment.PayoutAnswer{Status: payment.ProviderReversed, Reason: "rejected"}, nil
			}
			return payment.PayoutAnswer{Status: payment.ProviderSucceeded}, nil
		}}
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	t0 := time.Now().UTC()
	a.Engine.Now = func() time.Time { return t0 }
	first := make(chan error, 1)
	go func() {
		_, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1")
		first <- err
	}()
	<-p.started // a debited, holds the lease and is asking
	b.Engine.Now = func() time.Time { return t0.Add(payment.PayoutLease) }
	second := make(chan error, 1)
	var rec ledger.Record
	go func() {
		var err error
		rec, _, err = b.Verify(ctx, actor, cid, allowed, "wd-1")
		second <- err
	}()
	<-p.started // b took the lease that ran out and is asking again
	close(gates[1])
	if err := <-first; err != payment.ErrPayoutInProgress {
		t.Fatalf("the verify whose lease was taken: %v, want ErrPayoutInProgress", err)
	}
	stream := payment.StreamID(actor.MerchantID, actor.Environment, "wd-1")
	if st, _, err := Load(ctx, b.Engine, PaymentKind, stream); err != nil || st.Phase != payment.PayingOut {
		t.Fatalf("after the late answer: phase %q (%v), want still paying out for the lease's holder", st.Phase, err)
	}
	expectMain(t, b, cid, money.Naira(5000-1000-50))
	close(gates[2])
	if err := <-second; err != nil || rec.Status != ledger.Success {
		t.Fatalf("the lease's holder: %+v, %v", rec, err)
	}
	if st, _, err := Load(ctx, b.Engine, PaymentKind, stream); err != nil || st.Phase != payment.Done || st.Record.Status != ledger.Success {
		t.Fatalf("phase %q status %q (%v), want done and paid out", st.Phase, st.Record.Status, err)
	}
	expectMain(t, b, cid, money.Naira(5000-1000-50))
}

// appendDeadlines is a store that notes, per event type appended, how long
// the append's context had left (0: no deadline).
type appendDeadlines struct {
	eventstore.Store
	mu   sync.Mutex
	left map[string]time.Duration
}

func (s *appendDeadlines) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	var left time.Duration
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	s.mu.Lock()
	for _, sa := range appends {
		for _, ev := range sa.Events {
			s.left[ev.Type] = left
		}
	}
	s.mu.Unlock()
	return s.Store.Append(ctx, appends...)
}

func (s *appendDeadlines) of(eventType string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.left[eventType]
}

// A client that hangs up while its verify is asking the provider cuts
// neither the call short nor the recording of its answer: the payout is
// completed once, and the next verify answers it without asking again.
// The recording is still bounded (payoutRecordTimeout): no longer by the
// client, it must not wait forever on a stuck database.
func TestAHungUpClientStillRecordsThePayout(t *testing.T) {
	ctx := context.Background()
	p := &payoutProvider{started: make(chan struct{}, 2), release: make(chan struct{})}
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	appends := &appendDeadlines{Store: a.Engine.store, left: map[string]time.Duration{}}
	a.Engine.store = appends
	client, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := a.Verify(client, actor, cid, allowed, "wd-1")
		done <- err
	}()
	<-p.started
	hangUp()
	// A cancellation reaches the contexts made from the client's before
	// hangUp returns: the provider's call is not one of them.
	p.mu.Lock()
	callCtx := p.ctxs[0]
	p.mu.Unlock()
	if err := callCtx.Err(); err != nil {
		t.Fatalf("the hang-up cut the provider's call short: %v", err)
	}
	close(p.release)
	if err := <-done; err != nil {
		t.Fatalf("the hung-up verify: %v, want the payout recorded", err)
	}
	if left := appends.of("payment.payout_completed"); left <= 0 || left > payoutRecordTimeout {
		t.Fatalf("recording the payout had %v left, want a deadline within payoutRecordTimeout (%v)", left, payoutRecordTimeout)
	}
	rec, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("verify after the hang-up: %+v, %v", rec, err)
	}
	expectPaidOutOnce(t, p, b, cid)
}

// A provider that does not answer gives the lease up: the next verify, on
// either instance, asks again at once instead of waiting for the lease.
func TestAnUnansweredPayoutGivesTheLeaseUp(t *testing.T) {
	ctx := context.Background()
	p := unansweredOnce()
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPayoutUnanswered {
		t.Fatalf("first verify: %v, want ErrPayoutUnanswered", err)
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
	rec, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("second verify: %+v, %v", rec, err)
	}
	if calls := p.calls(); len(calls) != 2 {
		t.Fatalf("provider asked %d times, want twice", len(calls))
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
}

// slowStore is a store whose appends of the given event types take delay
// on the engine's clock (a slow or paused database, a GC pause): the clock
// moves on by delay once such an append has committed.
type slowStore struct {
	eventstore.Store
	mu    sync.Mutex
	now   time.Time
	delay map[string]time.Duration
}

func (s *slowStore) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *slowStore) slow(delay map[string]time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = delay
}

func (s *slowStore) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	res, err := s.Store.Append(ctx, appends...)
	if err == nil {
		s.mu.Lock()
		for _, sa := range appends {
			for _, ev := range sa.Events {
				s.now = s.now.Add(s.delay[ev.Type])
			}
		}
		s.mu.Unlock()
	}
	return res, err
}

// The holder's call to the provider ends PayoutCallTimeout after it took
// the lease, however long recording the lease took, so that it is over
// well before the lease runs out and another verify may ask: a holder whose
// lease took longer than that to record does not ask at all, gives the
// lease up and answers that the payout is unanswered.
func TestThePayoutCallEndsInsideTheLease(t *testing.T) {
	ctx := context.Background()
	store := &slowStore{Store: postgres.New(pgtest.NewPool(t)), now: time.Now().UTC()}
	t.Cleanup(store.Store.(*postgres.Store).Close)
	svc := NewService(NewEngine(store, 100))
	svc.Engine.Now = store.clock
	m, err := svc.CreateMerchant(ctx, "Shop", true, "NG", digest)
	if err != nil {
		t.Fatal(err)
	}
	actor := Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	p := &payoutProvider{}
	svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: p}
	cid := stageWithdrawals(t, svc, actor, "wd-1", "wd-2")
	const (
		started = "payment.payout_started"
		leased  = "payment.payout_leased"
	)
	// 20s to record the debit with its lease: 25s are left for the call.
	store.slow(map[string]time.Duration{started: 20 * time.Second})
	rec, _, err := svc.Verify(ctx, actor, cid, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("verify of wd-1: %+v, %v", rec, err)
	}
	want := payment.PayoutCallTimeout - 20*time.Second
	if left := p.deadlines(); len(left) != 1 || left[0] <= 0 || left[0] > want {
		t.Fatalf("the call had %v left, want at most %v (PayoutCallTimeout from the lease, not from the call)", left, want)
	}

	// 50s to record the debit: the call's time is spent before it starts.
	store.slow(map[string]time.Duration{started: 50 * time.Second})
	if _, _, err := svc.Verify(ctx, actor, cid, allowed, "wd-2"); err != ErrPayoutUnanswered {
		t.Fatalf("verify of wd-2 whose lease took 50s to record: %v, want ErrPayoutUnanswered", err)
	}
	if calls := p.calls(); len(calls) != 1 {
		t.Fatalf("provider asked for %v, want wd-1 only: wd-2's holder has no time left to ask", calls)
	}
	expectMain(t, svc, cid, money.Naira(5000-2*1050))
	// It gave the lease up: the next verify asks at once. Taking the lease
	// takes 20s to record this time.
	store.slow(map[string]time.Duration{leased: 20 * time.Second})
	rec, _, err = svc.Verify(ctx, actor, cid, allowed, "wd-2")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("verify of wd-2 after the holder gave up: %+v, %v", rec, err)
	}
	if left := p.deadlines(); len(left) != 2 || left[1] <= 0 || left[1] > want {
		t.Fatalf("the calls had %v left, want at most %v each", left, want)
	}
	expectMain(t, svc, cid, money.Naira(5000-2*1050))
}

// A verify on an instance with no payout provider refuses a withdrawal
// before it moves anything or takes the lease: a staged withdrawal is not
// debited (its money would sit in clearing with nobody to pay it out), and
// one paying out stays free for a verify that can ask the provider.
func TestVerifyWithoutPayoutsTakesNothing(t *testing.T) {
	ctx := context.Background()
	p := unansweredOnce()
	a, b, actor, cid := stagedWithdrawal(t, p, "wd-1")
	b.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}}
	if _, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPaymentsNotConfigured {
		t.Fatalf("staged, on the instance without payouts: %v, want ErrPaymentsNotConfigured", err)
	}
	expectMain(t, a, cid, money.Naira(5000))
	if st, _, err := Load(ctx, a.Engine, PaymentKind, payment.StreamID(actor.MerchantID, actor.Environment, "wd-1")); err != nil || st.Phase != payment.Staged {
		t.Fatalf("after the refusal the intent is %q (%v), want still staged", st.Phase, err)
	}

	if _, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPayoutUnanswered {
		t.Fatalf("first verify on the instance with payouts: %v, want ErrPayoutUnanswered", err)
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
	// B knows it is paying out (not a stale "staged" in its cache).
	if st, _, err := Load(ctx, b.Engine, PaymentKind, payment.StreamID(actor.MerchantID, actor.Environment, "wd-1")); err != nil || st.Phase != payment.PayingOut {
		t.Fatalf("B reads the intent %q (%v), want paying out", st.Phase, err)
	}
	if _, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1"); err != ErrPaymentsNotConfigured {
		t.Fatalf("paying out, on the instance without payouts: %v, want ErrPaymentsNotConfigured", err)
	}
	rec, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("verify on the instance with payouts right after: %+v, %v", rec, err)
	}
	if calls := p.calls(); len(calls) != 2 {
		t.Fatalf("provider asked %d times, want twice", len(calls))
	}
	expectMain(t, a, cid, money.Naira(5000-1000-50))
}

// The verify that debits a withdrawal holds the payout lease from that very
// append: the intent's stream is the intent, the debit leased to it for
// PayoutLease, and the payout, with no lease taken in a second append
// (which would leave a moment in which another verify could take the payout
// step from the one that debited). Its call to the provider is bounded by
// PayoutCallTimeout, inside the lease, so a provider that hangs cannot keep
// the call running into the next holder's lease.
func TestTheDebitCarriesThePayoutLease(t *testing.T) {
	ctx := context.Background()
	p := &payoutProvider{}
	a, _, actor, cid := stagedWithdrawal(t, p, "wd-1")
	t0 := time.Now().UTC().Truncate(time.Second)
	a.Engine.Now = func() time.Time { return t0 }
	rec, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("verify: %+v, %v", rec, err)
	}
	stream := PaymentKind.StreamName(payment.StreamID(actor.MerchantID, actor.Environment, "wd-1"))
	events, err := a.Engine.Store().ReadStream(ctx, stream, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	if want := []string{"payment.intent_created", "payment.payout_started", "payment.payout_completed"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	ev, err := payment.Registry.Decode(events[1].Type, events[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	started, ok := ev.(payment.PayoutStarted)
	if !ok || started.LeaseHolder == "" || !started.LeaseUntil.Equal(t0.Add(payment.PayoutLease)) {
		t.Fatalf("the debit %+v (%T), want it leased to its verify until %s", ev, ev, t0.Add(payment.PayoutLease))
	}
	budgets := p.deadlines()
	if len(budgets) != 1 || budgets[0] <= payment.PayoutCallTimeout-10*time.Second || budgets[0] > payment.PayoutCallTimeout {
		t.Fatalf("the provider call had %v, want one call bounded by PayoutCallTimeout %s", budgets, payment.PayoutCallTimeout)
	}
	if payment.PayoutCallTimeout >= payment.PayoutLease {
		t.Fatalf("PayoutCallTimeout %s must end inside PayoutLease %s", payment.PayoutCallTimeout, payment.PayoutLease)
	}
}

// Reference and Status complete gateway.Payouts: payoutProvider answers every send at
// once, so it is never asked where a payout stands.
func (p *payoutProvider) Reference(w ledger.Record) string { return w.ID }
func (p *payoutProvider) Status(context.Context, ledger.Record) (payment.PayoutAnswer, error) {
	return payment.PayoutAnswer{Status: payment.ProviderUnknown}, nil
}

// Instances whose machines' clocks disagree still agree on the payout
// lease: it is taken and compared on the database's clock. Here the second
// instance's clock runs two leases ahead of the first's; were the lease on
// the instances' clocks, it would find the first's lease long over while
// the first is still asking the provider, and ask the provider again.
func TestThePayoutLeaseIsOnTheDatabasesClock(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	t.Cleanup(store.Close)
	a, b, _, actor := twoInstancesOn(t, store)
	release, open := make(chan struct{}), make(chan struct{})
	close(open)
	p := &payoutProvider{started: make(chan struct{}, 1), gate: func(call int) <-chan struct{} {
		if call == 1 {
			return release // the first call answers once b has tried
		}
		return open
	}}
	for _, svc := range []*Service{a, b} {
		svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: p}
		svc.LeaseClock = postgres.Clock(pool)
	}
	b.Engine.Now = func() time.Time { return time.Now().UTC().Add(2 * payment.PayoutLease) }
	cid := stageWithdrawals(t, a, actor, "wd-1")

	first := make(chan error, 1)
	go func() {
		_, _, err := a.Verify(ctx, actor, cid, allowed, "wd-1")
		first <- err
	}()
	<-p.started // a has debited, holds the lease and is asking the provider
	if _, _, err := b.Verify(ctx, actor, cid, allowed, "wd-1"); err != payment.ErrPayoutInProgress {
		t.Errorf("verify on the instance whose clock runs ahead, inside the lease: %v, want %v", err, payment.ErrPayoutInProgress)
	}
	if _, _, err := b.ResumePayout(ctx, actor.MerchantID, actor.Environment, "wd-1", ResumerAgent); err != payment.ErrPayoutInProgress {
		t.Errorf("resume on the instance whose clock runs ahead, inside the lease: %v, want %v", err, payment.ErrPayoutInProgress)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the verify that paid out: %v", err)
	}
	expectPaidOutOnce(t, p, b, cid)
}
