package wallet

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func fold(events ...domain.Event) State {
	var s State
	for _, e := range events {
		s = Apply(s, e)
	}
	return s
}

// deposited is a wallet credited amount by test deposits at at.
func deposited(amount money.Amount, at time.Time) []domain.Event {
	return []domain.Event{Posted{TransactionID: "t0", Reference: "r0", Main: amount, TestDeposit: true, At: at}}
}

// funded is a wallet holding main and escrow, never topped up.
func funded(main, escrow money.Amount) []domain.Event {
	return []domain.Event{Posted{TransactionID: "t0", Reference: "r0", Main: main, Escrow: escrow, At: now.Add(-48 * time.Hour)}}
}

func topUp(at time.Time) Posted {
	return Posted{TransactionID: "tu", Reference: "tu", Main: money.Naira(1000), TopUp: true, At: at}
}

func move(postings ...ledger.Posting) ledger.Movement {
	return ledger.Movement{MerchantID: "m1", Environment: domain.Test, Postings: postings}
}

var (
	main1       = ledger.CustomerMain("c1")
	escrow1     = ledger.CustomerEscrow("c1")
	main2       = ledger.CustomerMain("c2")
	clearing    = ledger.ExternalClearing("m1")
	revenue     = ledger.PlatformRevenue("m1")
	merchant    = ledger.MerchantMain("m1")
	posting     = Posting{TransactionID: "t1", Reference: "r1", At: now}
	topUpPost   = Posting{TransactionID: "t1", Reference: "r1", TopUp: true, At: now}
	testDeposit = Posting{TransactionID: "t1", Reference: "r1", TestDeposit: true, At: now}
)

func TestPost(t *testing.T) {
	n := money.Naira
	tests := []struct {
		name    string
		given   []domain.Event
		m       ledger.Movement
		p       Posting
		want    *Posted
		wantErr error
	}{
		{name: "credit an empty wallet", m: move(ledger.Posting{From: clearing, To: main1, Amount: n(500)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(500), At: now}},
		{name: "a test deposit up to the day's bound", given: deposited(n(900_000), now.Add(-time.Hour)),
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(100_000)}), p: testDeposit,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(100_000), TestDeposit: true, At: now}},
		{name: "a test deposit past the day's bound by one kobo", given: deposited(n(900_000), now.Add(-time.Hour)),
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(100_000) + 1}), p: testDeposit, wantErr: ErrTestDepositsDailyLimit},
		{name: "yesterday's test deposits count nothing today", given: deposited(n(1_000_000), now.Add(-13*time.Hour)),
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(100_000)}), p: testDeposit,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(100_000), TestDeposit: true, At: now}},
		{name: "other credits count nothing toward the bound", given: funded(n(5_000_000), 0),
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1_000_000)}), p: testDeposit,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(1_000_000), TestDeposit: true, At: now}},
		{name: "debit within balance", given: funded(n(1000), 0),
			m: move(ledger.Posting{From: main1, To: clearing, Amount: n(400)}, ledger.Posting{From: main1, To: revenue, Amount: n(50)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: -n(450), At: now}},
		{name: "debit to exactly zero", given: funded(n(1000), 0),
			m: move(ledger.Posting{From: main1, To: clearing, Amount: n(950)}, ledger.Posting{From: main1, To: revenue, Amount: n(50)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: -n(1000), At: now}},
		{name: "overdraw main by one kobo", given: funded(n(1000), n(5000)),
			m: move(ledger.Posting{From: main1, To: clearing, Amount: n(1000) + 1}), p: posting, wantErr: ErrInsufficient},
		{name: "fee pushes the debit over main", given: funded(n(1000), 0),
			m: move(ledger.Posting{From: main1, To: clearing, Amount: n(1000)}, ledger.Posting{From: main1, To: revenue, Amount: n(50)}), p: posting, wantErr: ErrInsufficient},
		{name: "overdraw an empty wallet", m: move(ledger.Posting{From: main1, To: main2, Amount: 1}), p: posting, wantErr: ErrInsufficient},
		{name: "lock main into escrow", given: funded(n(1000), 0),
			m: move(ledger.Posting{From: main1, To: escrow1, Amount: n(1000)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: -n(1000), Escrow: n(1000), At: now}},
		{name: "release escrow to exactly zero", given: funded(0, n(1025)),
			m: move(ledger.Posting{From: escrow1, To: main2, Amount: n(1000)}, ledger.Posting{From: escrow1, To: revenue, Amount: n(25)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Escrow: -n(1025), At: now}},
		{name: "overdraw escrow although main could cover it", given: funded(n(5000), n(1000)),
			m: move(ledger.Posting{From: escrow1, To: main2, Amount: n(1000) + 1}), p: posting, wantErr: ErrInsufficient},
		{name: "escrow debit and main credit judged separately", given: funded(0, n(100)),
			m: move(ledger.Posting{From: escrow1, To: main1, Amount: n(100)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(100), Escrow: -n(100), At: now}},
		{name: "through main within one movement", given: funded(0, 0),
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(100)}, ledger.Posting{From: main1, To: main2, Amount: n(100)}), p: posting,
			want: nil},
		{name: "movement not touching the wallet", given: funded(n(1), 0),
			m: move(ledger.Posting{From: main2, To: merchant, Amount: n(100)}), p: posting, want: nil},
		{name: "other customer's escrow", given: funded(n(1), 0),
			m: move(ledger.Posting{From: ledger.CustomerEscrow("c2"), To: main2, Amount: n(100)}), p: posting, want: nil},
		{name: "merchant account named like the customer", given: funded(n(1), 0),
			m: move(ledger.Posting{From: ledger.MerchantMain("c1"), To: main2, Amount: n(100)}), p: posting, want: nil},
		{name: "first ever top-up", m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), p: topUpPost,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(1000), TopUp: true, At: now}},
		{name: "top-up after a deposit, never topped up", given: funded(n(10), 0),
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), p: topUpPost,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(1000), TopUp: true, At: now}},
		{name: "top-up 23h59m after the last", given: []domain.Event{topUp(now.Add(-23*time.Hour - 59*time.Minute))},
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), p: topUpPost, wantErr: ErrTopUpTooSoon},
		{name: "top-up 1ns short of 24h", given: []domain.Event{topUp(now.Add(-24*time.Hour + 1))},
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), p: topUpPost, wantErr: ErrTopUpTooSoon},
		{name: "top-up exactly 24h after the last", given: []domain.Event{topUp(now.Add(-24 * time.Hour))},
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), p: topUpPost,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(1000), TopUp: true, At: now}},
		{name: "an ordinary deposit right after a top-up", given: []domain.Event{topUp(now.Add(-time.Minute))},
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(5)}), p: posting,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(5), At: now}},
		{name: "later deposits do not move the top-up clock", given: []domain.Event{topUp(now.Add(-25 * time.Hour)), Posted{Main: n(1), At: now.Add(-time.Hour)}},
			m: move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), p: topUpPost,
			want: &Posted{TransactionID: "t1", Reference: "r1", Main: n(1000), TopUp: true, At: now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold(tt.given...)
			got, err := Post(s, "c1", tt.m, tt.p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || got != nil {
					t.Fatalf("Post() = %+v, %v; want %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Post() = %+v\nwant %+v", got, tt.want)
			}
			if got == nil {
				return
			}
			// The event applied to the state changes the balances by exactly
			// the movement's deltas, and never below zero.
			after := Apply(s, *got)
			d := tt.m.Deltas()
			if after.Main-s.Main != d[main1] || after.Escrow-s.Escrow != d[escrow1] {
				t.Fatalf("applied %+v -> %+v; deltas main %d escrow %d", s, after, d[main1], d[escrow1])
			}
			if after.Main < 0 || after.Escrow < 0 {
				t.Fatalf("negative balance %+v", after)
			}
		})
	}
}

func TestPostErrors(t *testing.T) {
	if domain.ErrorCode(ErrInsufficient) != domain.Invalid || domain.ErrorMessage(ErrInsufficient) != "Insufficient balance" {
		t.Fatalf("ErrInsufficient = %v", ErrInsufficient)
	}
	if domain.ErrorCode(ErrTopUpTooSoon) != domain.Unauthenticated ||
		domain.ErrorMessage(ErrTopUpTooSoon) != "You can only top up your account once a day" {
		t.Fatalf("ErrTopUpTooSoon = %v", ErrTopUpTooSoon)
	}
}

func TestApply(t *testing.T) {
	t1, t2 := now.Add(-72*time.Hour), now.Add(-time.Hour)
	tests := []struct {
		name  string
		given []domain.Event
		want  State
	}{
		{name: "nothing", want: State{}},
		{name: "credit", given: []domain.Event{Posted{Main: 100, At: t1}}, want: State{Main: 100}},
		{name: "credits and debits add up", given: []domain.Event{
			Posted{Main: 10_000, At: t1},
			Posted{Main: -2_500, Escrow: 2_500, At: t1},
			Posted{Escrow: -1_000, At: t2},
			Posted{Main: 1_000, At: t2},
		}, want: State{Main: 8_500, Escrow: 1_500}},
		{name: "top-ups set the clock, others leave it", given: []domain.Event{
			Posted{Main: 100_000, TopUp: true, At: t1},
			Posted{Main: 100_000, TopUp: true, At: t2},
			Posted{Main: -50_000, At: now},
		}, want: State{Main: 150_000, LastTopUpAt: t2}},
		{name: "pointer events are not wallet events", given: []domain.Event{&Posted{Main: 100}}, want: State{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fold(tt.given...); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("state %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A wallet's state is the sum of the movements posted to it: replaying a
// sequence of decided events (as stored and read back) gives the balances
// the deltas add up to.
func TestPostSequenceMatchesDeltas(t *testing.T) {
	n := money.Naira
	moves := []struct {
		m ledger.Movement
		p Posting
	}{
		{move(ledger.Posting{From: clearing, To: main1, Amount: n(1000)}), Posting{TransactionID: "a", TopUp: true, At: now}},
		{move(ledger.Posting{From: main1, To: escrow1, Amount: n(600)}), Posting{TransactionID: "b", At: now}},
		{move(ledger.Posting{From: escrow1, To: main2, Amount: n(585)}, ledger.Posting{From: escrow1, To: revenue, Amount: n(15)}), Posting{TransactionID: "c", At: now}},
		{move(ledger.Posting{From: main2, To: main1, Amount: n(1)}), Posting{TransactionID: "d", At: now}},
		{move(ledger.Posting{From: main1, To: clearing, Amount: n(351)}, ledger.Posting{From: main1, To: revenue, Amount: n(50)}), Posting{TransactionID: "e", At: now}},
	}
	var s State
	var total, totalEscrow money.Amount
	var stored []domain.Event
	for _, mv := range moves {
		ev, err := Post(s, "c1", mv.m, mv.p)
		if err != nil {
			t.Fatalf("%s: %v", mv.p.TransactionID, err)
		}
		if ev == nil {
			t.Fatalf("%s: nil event", mv.p.TransactionID)
		}
		s = Apply(s, *ev)
		d := mv.m.Deltas()
		total += d[main1]
		totalEscrow += d[escrow1]
		data, err := json.Marshal(*ev)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Registry.Decode(ev.EventType(), data)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, back)
	}
	if s.Main != total || s.Escrow != totalEscrow || s.Main != 0 || s.Escrow != 0 {
		t.Fatalf("state %+v; deltas main %d escrow %d", s, total, totalEscrow)
	}
	if _, err := Post(s, "c1", move(ledger.Posting{From: main1, To: clearing, Amount: 1}), posting); !errors.Is(err, ErrInsufficient) {
		t.Fatalf("empty wallet debit: %v", err)
	}
	if replayed := fold(stored...); !reflect.DeepEqual(replayed, s) {
		t.Fatalf("replayed %+v, want %+v", replayed, s)
	}
}

func TestRegistryRoundTrip(t *testing.T) {
	evs := []domain.Event{
		Posted{TransactionID: "t1", Reference: "r1", Main: 150_050, Escrow: -5, TopUp: true, At: now},
		Posted{TransactionID: "t2", Reference: "r2", Main: -1, At: now.Add(time.Second)},
		Posted{},
	}
	domaintest.RoundTrip(t, Registry, evs...)
}
