package app

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
	"github.com/escrowd/escrowd/eventstore/kurrent/kurrenttest"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

func digest(k string) string { return "d-" + k }

// twoInstances returns two services with their own caches on one store, as
// two server processes would have.
func twoInstances(t *testing.T) (*Service, *Service, eventstore.Store, Actor) {
	t.Helper()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	return twoInstancesOn(t, store)
}

// onBothStores runs test on PostgreSQL and on the KurrentDB adapter (over
// KURRENTDB_URL, or else an in-memory protocol server), each with two
// instances as twoInstances makes them.
func onBothStores(t *testing.T, test func(t *testing.T, a, b *Service, store eventstore.Store, actor Actor)) {
	t.Run("postgres", func(t *testing.T) {
		a, b, store, actor := twoInstances(t)
		test(t, a, b, store, actor)
	})
	t.Run("kurrent", func(t *testing.T) {
		store, err := kurrent.Open(kurrenttest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		a, b, store2, actor := twoInstancesOn(t, store)
		test(t, a, b, store2, actor)
	})
}

func twoInstancesOn(t *testing.T, store eventstore.Store) (*Service, *Service, eventstore.Store, Actor) {
	t.Helper()
	a, b := NewService(NewEngine(store, 100)), NewService(NewEngine(store, 100))
	m, err := a.CreateMerchant(context.Background(), "Shop", true, "NG", digest)
	if err != nil {
		t.Fatal(err)
	}
	return a, b, store, Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
}

// raceOnTwo runs f n times at once, alternating the two instances, and
// counts the outcomes: "ok", or the error's code and message. Every
// goroutine waits on a start barrier that opens only once all n are
// launched, so the calls overlap instead of running one after another.
func raceOnTwo(a, b *Service, n int, f func(i int, svc *Service) error) map[string]int {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f(i, []*Service{a, b}[i%2])
		}()
	}
	close(start)
	wg.Wait()
	out := map[string]int{}
	for _, err := range errs {
		if err == nil {
			out["ok"]++
		} else {
			out[string(domain.ErrorCode(err))+": "+domain.ErrorMessage(err)]++
		}
	}
	return out
}

func streamTypes(t *testing.T, store eventstore.Store, stream string) []string {
	t.Helper()
	evs, err := store.ReadStream(context.Background(), stream, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// A decision taken on a stale cached state must not be appended: the
// expected revision rejects it, the engine re-reads fresh and decides again.
func TestStaleCacheIsDecidedAgain(t *testing.T) {
	ctx := context.Background()
	a, b, store, actor := twoInstances(t)
	id, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	// Instance A caches the customer as active.
	if _, err := a.SetPermissions(ctx, actor, id, nil, ptr(false), nil); err != nil {
		t.Fatal(err)
	}
	// Instance B blocks it; A's cache does not know.
	if _, err := b.SetBlocked(ctx, actor, id, true, "fraud"); err != nil {
		t.Fatal(err)
	}
	// A's cached state says "active", so it decides to block: the append
	// conflicts, A re-reads and finds nothing to do.
	pos, err := a.SetBlocked(ctx, actor, id, true, "again")
	if err != nil {
		t.Fatal(err)
	}
	if pos != (eventstore.Position{}) {
		t.Fatalf("a second block was appended at %s", pos)
	}
	got := streamTypes(t, store, CustomerKind.StreamName(id))
	want := []string{"customer.created", "customer.permissions_changed", "customer.blocked"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream %v, want %v", got, want)
	}
	// And A's cache is now current: a decision on it appends at once.
	if _, err := a.SetBlocked(ctx, actor, id, false, ""); err != nil {
		t.Fatal(err)
	}
	st, rev, err := Load(ctx, b.Engine, CustomerKind, id)
	if err != nil || st.Blocked || rev != 3 || st.Permissions.CanSell {
		t.Fatalf("state %+v rev %d err %v", st, rev, err)
	}
}

// The state the cache folds after an append equals a fresh fold from the
// store.
func TestCacheFoldsAppendedEvents(t *testing.T) {
	ctx := context.Background()
	a, _, store, actor := twoInstances(t)
	id, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	email := "b@x.co"
	if _, err := a.UpdateCustomer(ctx, actor, id, customer.Update{Email: &email}); err != nil {
		t.Fatal(err)
	}
	cached, ok := a.Engine.cache.get(CustomerKind.StreamName(id))
	if !ok {
		t.Fatal("not cached after append")
	}
	fresh, rev, _, err := load(ctx, NewEngine(store, 1), CustomerKind, CustomerKind.StreamName(id), true)
	if err != nil {
		t.Fatal(err)
	}
	if cached.rev != rev || cached.state.(customer.State) != fresh {
		t.Fatalf("cached %+v@%d, fresh %+v@%d", cached.state, cached.rev, fresh, rev)
	}
	// The old email was released and the new one reserved, in the same append.
	old, _, _ := Load(ctx, a.Engine, ReservationKind, customer.EmailKey(actor.MerchantID, actor.Environment, "a@x.co"))
	cur, _, _ := Load(ctx, a.Engine, ReservationKind, customer.EmailKey(actor.MerchantID, actor.Environment, "b@x.co"))
	if old.Holder != "" || cur.Holder != id {
		t.Fatalf("reservations old=%q new=%q", old.Holder, cur.Holder)
	}
}

// Two instances racing to give one email to different customers: exactly
// one wins, the other gets the uniqueness error, whatever their caches say.
func TestEmailRaceAcrossInstances(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	const n = 10
	got := raceOnTwo(a, b, n, func(i int, svc *Service) error {
		_, _, err := svc.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B",
			Email: "same@x.co", Phone: fmt.Sprintf("080312345%02d", i)})
		return err
	})
	if want := map[string]int{"ok": 1, "invalid: A customer with this email already exists under this merchant": n - 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// A decision error is returned as is and nothing is appended.
func TestDecisionErrorAppendsNothing(t *testing.T) {
	ctx := context.Background()
	a, _, store, actor := twoInstances(t)
	_, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "bad", Phone: "08031234567"})
	var de *domain.Error
	if !errors.As(err, &de) || de.Message != "email must be a valid email address" {
		t.Fatalf("err %v", err)
	}
	// Committed rows, whatever the readers' visibility horizon: only the
	// merchant's own events exist.
	var others int
	if err := store.(*postgres.Store).Pool().QueryRow(ctx,
		`SELECT count(*) FROM es_events WHERE stream_id NOT LIKE 'merchant-%'`).Scan(&others); err != nil || others != 0 {
		t.Fatalf("%d non-merchant events (%v)", others, err)
	}
}

func ptr[T any](v T) *T { return &v }

// Fees an operator sets through another process count at once: instance A
// has the merchant cached, instance B changes the fees, and A's next
// escrow freezes the new fee terms and its next withdrawal charges the new
// withdrawal fee (no expected revision would catch a stale read: neither
// command writes the merchant).
func TestNewFeesCountAtOnceAcrossInstances(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	draft := escrow.Draft{Amount: money.Naira(1000), Purpose: "Phone", WhoPays: "buyer"}
	before, err := a.CreateEscrow(ctx, actor, "", draft) // caches the merchant in A
	if err != nil {
		t.Fatal(err)
	}
	newFees := merchant.DefaultFees
	newFees.EscrowFeeBps, newFees.CommissionBps, newFees.BankWithdrawalFee = 400, 2500, 7000
	if _, err := b.UpdateMerchant(ctx, actor.MerchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.FeesSet{Fees: newFees}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	after, err := a.CreateEscrow(ctx, actor, "", draft)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Escrow.FeeTerms; got.EscrowFeeBps != 400 || got.CommissionBps != 2500 {
		t.Fatalf("escrow after the fee change froze %+v (before: %+v)", got, before.Escrow.FeeTerms)
	}
	if after.Escrow.Fee != money.Naira(40) || before.Escrow.Fee != money.Naira(25) {
		t.Fatalf("fees %s then %s, want 25 then 40", before.Escrow.Fee, after.Escrow.Fee)
	}
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.TopUp(ctx, actor, cid, money.Naira(10000)); err != nil {
		t.Fatal(err)
	}
	wd, err := a.CreateIntent(ctx, actor, cid, customer.Permissions{CanWithdraw: true}, IntentRequest{Reference: "wd-1",
		Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: domaintest.NUBAN(t, "058", "12", false), BankCode: "058"}})
	if err != nil {
		t.Fatal(err)
	}
	if wd.Record.Fee != 7000 {
		t.Fatalf("withdrawal fee %s, want the new 70", wd.Record.Fee)
	}
	// A withdrawal is no exception when nothing else reads the merchant
	// first: A has it cached from the withdrawal above, B changes the fee
	// again, and A's very next command is a withdrawal.
	newFees.BankWithdrawalFee = 9000
	if _, err := b.UpdateMerchant(ctx, actor.MerchantID, func(merchant.State) ([]domain.Event, error) {
		return []domain.Event{merchant.FeesSet{Fees: newFees}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	wd2, err := a.CreateIntent(ctx, actor, cid, customer.Permissions{CanWithdraw: true}, IntentRequest{Reference: "wd-2",
		Type: ledger.Withdrawal, Amount: money.Naira(1000),
		Withdrawal: &ledger.WithdrawalDetails{AccountNumber: domaintest.NUBAN(t, "058", "12", false), BankCode: "058"}})
	if err != nil {
		t.Fatal(err)
	}
	if wd2.Record.Fee != 9000 {
		t.Fatalf("second withdrawal fee %s, want the newer 90", wd2.Record.Fee)
	}
}

// Reading the merchant "latest" costs no read of its stream once it is
// cached: the append observes the stream at the revision read instead
// (TestNewFeesCountAtOnceAcrossInstances shows a change still counts).
func TestLatestMerchantIsObservedNotRead(t *testing.T) {
	ctx := context.Background()
	_, _, store, actor := twoInstances(t)
	reads := &streamReads{Store: store, stream: MerchantKind.StreamName(actor.MerchantID)}
	svc := NewService(NewEngine(reads, 100))
	draft := escrow.Draft{Amount: money.Naira(1000), Purpose: "Phone", WhoPays: "buyer"}
	if _, err := svc.CreateEscrow(ctx, actor, "", draft); err != nil { // loads the merchant
		t.Fatal(err)
	}
	loaded := reads.count.Load()
	for range 3 {
		if _, err := svc.CreateEscrow(ctx, actor, "", draft); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.count.Load() - loaded; n != 0 {
		t.Fatalf("three escrows read the cached merchant's stream %d times, want 0", n)
	}
}

// A refusal is decided again only when it may rest on a cached state that
// was not read from the store; one decided on what was just read is final
// at once, and with a single attempt a refusal is still returned.
func TestRefusalsAreDecidedAgainOnlyOnCachedState(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	engine := NewEngine(store, 100)
	if _, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
		Append(tx, CustomerKind, "c1", customer.Blocked{Reason: "x"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	refusal := domain.Invalidf("no")
	decides := 0
	refuse := func(tx *Tx) error {
		decides++
		if _, err := Read(tx, CustomerKind, "c1"); err != nil {
			return err
		}
		return refusal
	}
	cold := NewEngine(store, 100) // nothing cached: the read goes to the store
	if _, err := cold.Do(ctx, domain.Meta{}, refuse); !errors.Is(err, refusal) || decides != 1 {
		t.Fatalf("refusal on a store read: %v after %d decisions, want it after 1", err, decides)
	}
	decides = 0 // engine has c1 cached from its own append
	if _, err := engine.Do(ctx, domain.Meta{}, refuse); !errors.Is(err, refusal) || decides != 2 {
		t.Fatalf("refusal on a cached state: %v after %d decisions, want it after 2", err, decides)
	}
	decides = 0
	engine.MaxAttempts = 1
	if _, err := engine.Do(ctx, domain.Meta{}, refuse); !errors.Is(err, refusal) || decides != 1 {
		t.Fatalf("single attempt: %v after %d decisions, want the refusal after 1", err, decides)
	}
}

// Append's revision check is skipped only for a stream the command did not
// read: reading it after appending to it in the same command makes the
// append prove the state read, in either order.
func TestReadAfterAppendIsChecked(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	engine := NewEngine(store, 100)
	stream := CustomerKind.StreamName("c1")
	if _, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
		Append(tx, CustomerKind, "c1", customer.Blocked{Reason: "first"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	metaJSON, err := marshalMeta(domain.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	if _, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
		runs++
		Append(tx, CustomerKind, "c1", customer.Blocked{Reason: "ours"})
		if _, err := Read(tx, CustomerKind, "c1"); err != nil {
			return err
		}
		if runs == 1 { // another writer changes what was just read
			ev, err := eventData(engine, customer.Blocked{Reason: "other writer"}, metaJSON)
			if err != nil {
				return err
			}
			if _, err := store.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any,
				Events: []eventstore.EventData{ev}}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("decided %d times, want 2: the append must conflict with the write after the read", runs)
	}
}

// A decision's expected revision is not replaced by a later read of the
// same stream in the command: events decided on a stream taken to be new
// (ReadNew), or created without a read (Record), still expect no stream
// when the command goes on to read it, so they conflict if it exists
// instead of being appended to it as if its state had been read first.
func TestALaterReadKeepsTheExpectation(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	other, engine := NewEngine(store, 100), NewEngine(store, 100)
	for _, tc := range []struct {
		id      string
		decided func(tx *Tx) error // on the assumption that id is new
	}{
		{"taken-to-be-new", func(tx *Tx) error {
			c, err := ReadNew(tx, CustomerKind, "taken-to-be-new")
			if err != nil || c.Exists() {
				return fmt.Errorf("ReadNew on a cold cache: %+v, %v; want it taken to be absent", c, err)
			}
			Record(tx, CustomerKind, "taken-to-be-new", customer.Blocked{Reason: "assumed new"})
			return nil
		}},
		{"created", func(tx *Tx) error {
			Record(tx, CustomerKind, "created", customer.Blocked{Reason: "assumed new"})
			return nil
		}},
	} {
		t.Run(tc.id, func(t *testing.T) {
			// Another instance wrote the stream: this engine has nothing cached.
			if _, err := other.Do(ctx, domain.Meta{}, func(tx *Tx) error {
				Append(tx, CustomerKind, tc.id, customer.Blocked{Reason: "exists"})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			runs := 0
			if _, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
				runs++
				if runs > 1 { // decided again on what the store holds
					return ErrNothingToDo
				}
				if err := tc.decided(tx); err != nil {
					return err
				}
				_, err := Read(tx, CustomerKind, tc.id)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			events, err := store.ReadStream(ctx, CustomerKind.StreamName(tc.id), 0, 10)
			if err != nil || runs != 2 || len(events) != 1 {
				t.Fatalf("decided %d times, stream has %d events (%v); want 2 decisions and the one event: "+
					"the events decided on its absence must conflict, not follow the read", runs, len(events), err)
			}
		})
	}
}

// conflictingStore loses every append to a concurrent writer.
type conflictingStore struct {
	eventstore.Store
	appends int
}

func (s *conflictingStore) Append(_ context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	s.appends++
	return eventstore.AppendResult{}, &eventstore.ConcurrencyError{Stream: appends[0].Stream}
}

// A command that loses the race on every attempt gives up with
// ErrContended: a resumable 503 (the repeat finishes it), not the store's
// conflict, which the API would answer as a 500 and replay for its
// Idempotency-Key.
func TestContendedCommandIsResumable(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	losing := &conflictingStore{Store: store}
	engine := NewEngine(losing, 100)
	engine.MaxAttempts = 3
	_, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
		Append(tx, CustomerKind, "c1", customer.Blocked{Reason: "x"})
		return nil
	})
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.Unavailable || !de.Resumable || err != ErrContended {
		t.Fatalf("after losing every attempt: %v, want ErrContended", err)
	}
	if losing.appends != 3 {
		t.Fatalf("%d appends, want one per attempt (3)", losing.appends)
	}
}

// cancellingStore loses every append, and cancels the request's context
// on the first.
type cancellingStore struct {
	conflictingStore
	cancel context.CancelFunc
}

func (s *cancellingStore) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	s.cancel()
	return s.conflictingStore.Append(ctx, appends...)
}

// A command whose request is cancelled while it backs off after a
// conflict stops at once with the context's error, instead of retrying
// every attempt for a client that is gone.
func TestBackoffStopsForACancelledRequest(t *testing.T) {
	store := postgres.New(pgtest.NewPool(t))
	t.Cleanup(store.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	losing := &cancellingStore{conflictingStore: conflictingStore{Store: store}, cancel: cancel}
	engine := NewEngine(losing, 100)
	_, err := engine.Do(ctx, domain.Meta{}, func(tx *Tx) error {
		Append(tx, CustomerKind, "c1", customer.Blocked{Reason: "x"})
		return nil
	})
	if !errors.Is(err, context.Canceled) || losing.appends != 1 {
		t.Fatalf("after a cancel: %v with %d appends, want context.Canceled after 1", err, losing.appends)
	}
}
