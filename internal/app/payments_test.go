package app

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/eventstore"
)

var allowed = customer.Permissions{CanBuy: true, CanSell: true, CanWithdraw: true}

// Verify decides from the cached intent, but a stale cache never makes it
// refuse or pay twice: instance B has cached "no such intent" and then
// "staged" while instance A creates, then settles it.
func TestVerifyOnAStaleCache(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Intent(ctx, actor, cid, "dep"); err != payment.ErrNotFound {
		t.Fatalf("before staging: %v", err)
	}
	in := IntentRequest{Reference: "dep", Type: ledger.Deposit, Amount: money.Naira(500)}
	if _, err := a.CreateIntent(ctx, actor, cid, allowed, in); err != nil {
		t.Fatal(err)
	}
	// B's cache says there is no such intent: B must look again, not refuse.
	st, err := b.Intent(ctx, actor, cid, "dep")
	if err != nil || st.Phase != payment.Staged {
		t.Fatalf("B after A staged: %+v, %v", st.Phase, err)
	}
	// A settles it; B, whose cache still says staged, verifies: the stored
	// outcome, and the money moved once.
	if _, _, err := a.Verify(ctx, actor, cid, allowed, "dep"); err != nil {
		t.Fatal(err)
	}
	rec, _, err := b.Verify(ctx, actor, cid, allowed, "dep")
	if err != nil || rec.Status != ledger.Success {
		t.Fatalf("B's verify: %+v, %v", rec, err)
	}
	w, _, err := Load(ctx, b.Engine, WalletKind, cid)
	if err != nil || w.Main != money.Naira(500) {
		t.Fatalf("wallet %+v, %v: the deposit must be credited exactly once", w, err)
	}
	// Another customer's reference is refused, on fresh state.
	other, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "C", Lastname: "D", Email: "c@x.co", Phone: "08031234568"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Verify(ctx, actor, other, allowed, "dep"); err != payment.ErrNotFound {
		t.Fatalf("another customer's reference: %v", err)
	}
}

// The once-a-day top-up rule holds under racing top-ups on two instances:
// the rule is decided on the wallet's revision-checked state.
func TestTopUpOnceUnderRaces(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	cid, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	got := raceOnTwo(a, b, n, func(_ int, svc *Service) error {
		_, _, err := svc.TopUp(ctx, actor, cid, money.Naira(1000))
		return err
	})
	if want := map[string]int{"ok": 1, "unauthenticated: You can only top up your account once a day": n - 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	w, _, err := Load(ctx, a.Engine, WalletKind, cid)
	if err != nil || w.Main != money.Naira(1000) {
		t.Fatalf("main %s (%v): want exactly one top-up", w.Main, err)
	}
}

// A repeated escrow payment answers with the escrows the payment funded,
// even when this instance first decided on a stale cache or on nothing at
// all and built escrows of its own (a clone that was never appended): the
// link is multi-unit, so buying it again is allowed, and only the payment
// stream's expected revision stops a second payment. "stale cache":
// instance B has "no such payment" and the unsold link cached while A pays
// with the reference. "cold": B has nothing cached, so it takes the
// reference to be new without reading it (ReadNew), and the append must
// prove that (expecting no stream), not add a second payment to the stream.
func TestRepeatedEscrowPaymentAnswersWhatWasFunded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached bool // B has the payment (absent) and the link cached
	}{{"stale cache", true}, {"cold", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a, b, store, actor := twoInstances(t)
			buyer, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := a.TopUp(ctx, actor, buyer, money.Naira(10000)); err != nil {
				t.Fatal(err)
			}
			link, err := a.CreateEscrow(ctx, actor, "", escrow.Draft{Amount: money.Naira(1000), Purpose: "Bag", WhoPays: "buyer", TotalQuantity: ptr(3)})
			if err != nil {
				t.Fatal(err)
			}
			in := EscrowPayment{Reference: "pay-1", Amount: link.Escrow.Due(), EscrowIDs: []string{link.Escrow.ID}}
			stream := PaymentKind.StreamName(payment.StreamID(actor.MerchantID, actor.Environment, in.Reference))
			if tc.cached {
				if _, _, err := Load(ctx, b.Engine, PaymentKind, payment.StreamID(actor.MerchantID, actor.Environment, in.Reference)); err != nil {
					t.Fatal(err)
				}
				if _, _, err := Load(ctx, b.Engine, EscrowKind, link.Escrow.ID); err != nil {
					t.Fatal(err)
				}
			} else if _, ok := b.Engine.cache.get(stream); ok {
				t.Fatal("B has the payment cached: the cold case needs it unread")
			}
			first, err := a.PayEscrows(ctx, actor, buyer, allowed, in)
			if err != nil || len(first.Escrows) != 1 || first.Escrows[0].ParentID != link.Escrow.ID {
				t.Fatalf("first payment %+v, %v", first, err)
			}
			before, err := store.ReadStream(ctx, stream, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			again, err := b.PayEscrows(ctx, actor, buyer, allowed, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Escrows) != 1 || again.Escrows[0].ID != first.Escrows[0].ID || again.Escrows[0].PaymentID != first.Record.ID ||
				again.Record.ID != first.Record.ID {
				t.Fatalf("repeat answered escrows %+v (record %s), want the clone %s funded by %s",
					again.Escrows, again.Record.ID, first.Escrows[0].ID, first.Record.ID)
			}
			if after, err := store.ReadStream(ctx, stream, 0, 100); err != nil || len(after) != len(before) {
				t.Fatalf("the payment stream grew from %d to %d events (%v)", len(before), len(after), err)
			}
			w, _, err := Load(ctx, a.Engine, WalletKind, buyer)
			if err != nil || w.Main != money.Naira(10000)-in.Amount || w.Escrow != link.Escrow.Held() {
				t.Fatalf("wallet %+v, %v: the payment must move money once", w, err)
			}
		})
	}
}

// An escrow payment's record carries the buyer's fee share of the escrows
// it funded, not the one its intent was staged with: the terms may change
// between staging and verify while the total due stays the same (here the
// fee moves to the seller and the merchant adds an equal additional fee).
func TestEscrowPaymentRecordsTheFeeItCharged(t *testing.T) {
	ctx := context.Background()
	a, _, _, actor := twoInstances(t)
	seller, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "S", Lastname: "S", Email: "s@x.co", Phone: "08031234560"})
	if err != nil {
		t.Fatal(err)
	}
	buyer, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.TopUp(ctx, actor, buyer, money.Naira(10000)); err != nil {
		t.Fatal(err)
	}
	e, err := a.CreateEscrow(ctx, actor, seller, escrow.Draft{Amount: money.Naira(1000), Purpose: "Bag", WhoPays: "buyer"})
	if err != nil {
		t.Fatal(err)
	}
	staged, err := a.CreateIntent(ctx, actor, buyer, allowed, IntentRequest{Reference: "esc-1", Type: ledger.EscrowPayment,
		Amount: money.Naira(1025), EscrowIDs: []string{e.Escrow.ID}})
	if err != nil || staged.Record.Fee != money.Naira(25) {
		t.Fatalf("staged %+v, %v", staged.Record, err)
	}
	if _, err := a.EditEscrow(ctx, actor, seller, e.Escrow.ID, escrow.Patch{WhoPays: ptr("seller")}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetAdditionalFee(ctx, actor, e.Escrow.ID, money.Naira(25), nil); err != nil {
		t.Fatal(err)
	}
	rec, _, err := a.Verify(ctx, actor, buyer, allowed, "esc-1")
	if err != nil || rec.Status != ledger.Success || rec.Amount != money.Naira(1025) {
		t.Fatalf("verify: %+v, %v", rec, err)
	}
	if rec.Fee != 0 {
		t.Fatalf("record fee %s, want 0: the seller bears the escrow fee of what was funded", rec.Fee)
	}
	w, _, err := Load(ctx, a.Engine, WalletKind, buyer)
	if err != nil || w.Main != money.Naira(10000-1025) || w.Escrow != money.Naira(1000) {
		t.Fatalf("buyer wallet %+v, %v", w, err)
	}
	// And when the buyer does bear it, the record carries the buyer's share
	// (not 0, whatever the path: paid at once here).
	e2, err := a.CreateEscrow(ctx, actor, seller, escrow.Draft{Amount: money.Naira(1000), Purpose: "Bag", WhoPays: "buyer"})
	if err != nil {
		t.Fatal(err)
	}
	paid, err := a.PayEscrows(ctx, actor, buyer, allowed, EscrowPayment{Reference: "esc-2", Amount: money.Naira(1025), EscrowIDs: []string{e2.Escrow.ID}})
	if err != nil || paid.Record.Status != ledger.Success {
		t.Fatalf("pay: %+v, %v", paid.Record, err)
	}
	if paid.Record.Fee != money.Naira(25) || paid.Record.Fee != e2.Escrow.BuyerFee() {
		t.Fatalf("record fee %s, want the buyer's share 25", paid.Record.Fee)
	}
	if w, _, err = Load(ctx, a.Engine, WalletKind, buyer); err != nil || w.Main != money.Naira(10000-2*1025) || w.Escrow != money.Naira(1000+1025) {
		t.Fatalf("buyer wallet after the second payment %+v, %v", w, err)
	}
}

// A payment's reference is taken to be new without reading its stream
// (ReadNew). Repeated on an instance that has nothing cached for it, the
// payment still answers its stored outcome and moves nothing, even though
// a decision on the assumption alone would refuse it: the buyer has spent
// the whole balance on it.
func TestRepeatedEscrowPaymentOnAColdInstance(t *testing.T) {
	ctx := context.Background()
	a, b, store, actor := twoInstances(t)
	buyer, _, err := a.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B", Email: "a@x.co", Phone: "08031234567"})
	if err != nil {
		t.Fatal(err)
	}
	link, err := a.CreateEscrow(ctx, actor, "", escrow.Draft{Amount: money.Naira(1000), Purpose: "Bag", WhoPays: "buyer"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.TopUp(ctx, actor, buyer, link.Escrow.Due()); err != nil {
		t.Fatal(err)
	}
	in := EscrowPayment{Reference: "pay-cold", Amount: link.Escrow.Due(), EscrowIDs: []string{link.Escrow.ID}}
	stream := PaymentKind.StreamName(payment.StreamID(actor.MerchantID, actor.Environment, in.Reference))
	reads := &streamReads{Store: a.Engine.store, stream: stream}
	a.Engine.store = reads
	first, err := a.PayEscrows(ctx, actor, buyer, allowed, in)
	if err != nil {
		t.Fatal(err)
	}
	if n := reads.count.Load(); n != 0 {
		t.Fatalf("the first payment read its new payment stream %d times, want none (ReadNew)", n)
	}
	before, err := store.ReadStream(ctx, stream, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, svc := range []*Service{b, a} { // b cold, a with the payment cached
		again, err := svc.PayEscrows(ctx, actor, buyer, allowed, in)
		if err != nil {
			t.Fatalf("repeat %d: %v", i, err)
		}
		if again.Record.ID != first.Record.ID || len(again.Escrows) != 1 || again.Escrows[0].ID != first.Escrows[0].ID {
			t.Fatalf("repeat %d answered %+v, want the first payment's outcome %+v", i, again.Record, first.Record)
		}
	}
	after, err := store.ReadStream(ctx, stream, 0, 100)
	if err != nil || len(after) != len(before) {
		t.Fatalf("the payment stream grew from %d to %d events (%v)", len(before), len(after), err)
	}
	w, _, err := Load(ctx, a.Engine, WalletKind, buyer)
	if err != nil || w.Main != 0 || w.Escrow != link.Escrow.Held() {
		t.Fatalf("wallet %+v, %v: the payment must move money once", w, err)
	}
}

// streamReads counts the reads of one stream.
type streamReads struct {
	eventstore.Store
	stream string
	count  atomic.Int64
}

func (s *streamReads) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	if stream == s.stream {
		s.count.Add(1)
	}
	return s.Store.ReadStream(ctx, stream, from, limit)
}
