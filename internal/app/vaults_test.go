package app

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/domain/escrow"
	recordids "github.com/escrowd/escrowd/domain/ids"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/eventstore"
)

var phoneSeq atomic.Int64

// fundedCustomers creates n customers of the actor's merchant, each topped
// up with main naira.
func fundedCustomers(t *testing.T, svc *Service, actor Actor, tag string, n int, main int64) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := 0; i < n; i++ {
		cid, _, err := svc.CreateCustomer(ctx, actor, customer.NewCustomer{Firstname: "A", Lastname: "B",
			Email: fmt.Sprintf("%s%d@x.co", tag, i), Phone: fmt.Sprintf("0803%07d", phoneSeq.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		if main > 0 {
			if _, _, err := svc.TopUp(ctx, actor, cid, money.Naira(main)); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, cid)
	}
	return ids
}

func walletOf(t *testing.T, svc *Service, cid string) wallet.State {
	t.Helper()
	w, _, err := Load(context.Background(), svc.Engine, WalletKind, cid)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func draftOf(ids []string, naira ...int64) escrow.VaultDraft {
	d := escrow.VaultDraft{Purpose: "Pool"}
	for i, id := range ids {
		d.Participants = append(d.Participants, escrow.Stake{CustomerID: id, Amount: money.Naira(naira[i])})
	}
	return d
}

// A vault creation racing withdrawals of one of its participants, on two
// instances: the participant's main balance never goes below zero, and the
// vault either locked every stake or none (the others' wallets untouched).
func TestVaultCreationRacingWithdrawals(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	account := domaintest.NUBAN(t, "058", "12", false)
	created := 0
	for round := 0; round < 6; round++ {
		ids := fundedCustomers(t, a, actor, fmt.Sprintf("r%d-", round), 3, 5000)
		busy := ids[0]
		const withdrawals = 5 // of 1,000 + 50 fee each: only 4 fit in 5,000
		for w := 0; w < withdrawals; w++ {
			in := IntentRequest{Reference: fmt.Sprintf("w%d-%d", round, w), Type: ledger.Withdrawal, Amount: money.Naira(1000),
				Withdrawal: &ledger.WithdrawalDetails{AccountNumber: account, BankCode: "058"}}
			if _, err := a.CreateIntent(ctx, actor, busy, allowed, in); err != nil {
				t.Fatal(err)
			}
		}
		delay := time.Duration(round) * 2 * time.Millisecond // the withdrawals start later each round
		var vaultErr error
		got := raceOnTwo(a, b, withdrawals+1, func(i int, svc *Service) error {
			if i == withdrawals {
				_, vaultErr = svc.CreateVault(ctx, actor, draftOf(ids, 2000, 1000, 1000))
				return nil
			}
			time.Sleep(delay)
			_, _, err := svc.Verify(ctx, actor, busy, allowed, fmt.Sprintf("w%d-%d", round, i))
			return err
		})
		paid := got["ok"] - 1
		w0, w1, w2 := walletOf(t, a, busy), walletOf(t, a, ids[1]), walletOf(t, a, ids[2])
		t.Logf("round %d: vault %v, withdrawals %v", round, vaultErr, got)
		switch {
		case vaultErr == nil:
			created++
			if w0.Escrow != money.Naira(2000) || w1.Main != money.Naira(4000) || w1.Escrow != money.Naira(1000) ||
				w2.Main != money.Naira(4000) || w2.Escrow != money.Naira(1000) {
				t.Fatalf("round %d: a vault that did not lock every stake: %+v %+v %+v", round, w0, w1, w2)
			}
			if w0.Main != money.Naira(5000-2000)-money.Amount(paid)*money.Naira(1050) || paid > 2 {
				t.Fatalf("round %d: main %s after the vault and %d withdrawals", round, w0.Main, paid)
			}
		case vaultErr.Error() == "Insufficient balance for participant "+busy:
			if w0.Escrow != 0 || w1.Main != money.Naira(5000) || w1.Escrow != 0 || w2.Main != money.Naira(5000) || w2.Escrow != 0 {
				t.Fatalf("round %d: a refused vault locked something: %+v %+v %+v", round, w0, w1, w2)
			}
			if w0.Main != money.Naira(5000)-money.Amount(paid)*money.Naira(1050) || paid < 3 {
				t.Fatalf("round %d: main %s after %d withdrawals, and the vault refused", round, w0.Main, paid)
			}
		default:
			t.Fatalf("round %d: vault %v", round, vaultErr)
		}
		if w0.Main < 0 {
			t.Fatalf("round %d: overdrawn: %+v", round, w0)
		}
		for k, n := range got {
			if k != "ok" && k != "invalid: Insufficient balance" {
				t.Fatalf("round %d: withdrawal outcome %q ×%d", round, k, n)
			}
		}
	}
	t.Logf("%d of 6 vaults created", created)
}

// Vaults over the same wallets, in every order, racing each other on two
// instances: the event store locks streams in one order, so none
// deadlocks; each ends created or refused for a balance,
// and every wallet's escrow balance is exactly the stakes it locked.
func TestVaultsOverSharedWalletsDoNotDeadlock(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	ids := fundedCustomers(t, a, actor, "d", 4, 20000)
	rng := rand.New(rand.NewPCG(19, 27))
	const n = 16
	drafts := make([]escrow.VaultDraft, n)
	for i := range drafts {
		perm := rng.Perm(len(ids))[:2+rng.IntN(3)]
		var who []string
		var naira []int64
		for _, j := range perm {
			who, naira = append(who, ids[j]), append(naira, 500+rng.Int64N(3000))
		}
		drafts[i] = draftOf(who, naira...)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	locked := make([]bool, n)
	got := raceOnTwo(a, b, n, func(i int, svc *Service) error {
		_, err := svc.CreateVault(ctx, actor, drafts[i])
		locked[i] = err == nil
		return err
	})
	for k := range got {
		if k != "ok" && !strings.HasPrefix(k, "invalid: Insufficient balance for participant ") {
			t.Fatalf("outcomes %v", got)
		}
	}
	want := map[string]money.Amount{}
	for i, d := range drafts {
		if locked[i] {
			for _, p := range d.Participants {
				want[p.CustomerID] += p.Amount
			}
		}
	}
	for _, id := range ids {
		w := walletOf(t, b, id)
		if w.Escrow != want[id] || w.Main+w.Escrow != money.Naira(20000) || w.Main < 0 {
			t.Fatalf("wallet %s %+v, stakes locked %s", id, w, want[id])
		}
	}
	t.Logf("outcomes %v", got)
}

// Winners and cancels of one vault racing on two instances: it settles
// once; every other call finds it settled; the money moved once.
func TestVaultSettlesOnceUnderRaces(t *testing.T) {
	ctx := context.Background()
	a, b, _, actor := twoInstances(t)
	for round := 0; round < 3; round++ {
		ids := fundedCustomers(t, a, actor, fmt.Sprintf("s%d-", round), 3, 10000)
		res, err := a.CreateVault(ctx, actor, draftOf(ids, 1000, 1000, 1010))
		if err != nil {
			t.Fatal(err)
		}
		id := res.Escrow.ID
		const n = 10
		got := raceOnTwo(a, b, n, func(i int, svc *Service) error {
			if (i+round)%2 == 0 {
				_, err := svc.CancelVault(ctx, actor, id)
				return err
			}
			_, err := svc.DeclareVaultWinner(ctx, actor, id, ids[i%3])
			return err
		})
		if want := map[string]int{"ok": 1, "invalid: Vault is already settled": n - 1}; !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: outcomes %v, want %v", round, got, want)
		}
		v, _, err := Load(ctx, b.Engine, EscrowKind, id)
		if err != nil {
			t.Fatal(err)
		}
		// Pot 3010, fee 75: shares 24.92, 24.92, 25.16 on a cancel.
		mains := map[string]money.Amount{}
		for _, cid := range ids {
			mains[cid] = money.Naira(9000)
		}
		mains[ids[2]] = money.Naira(8990)
		switch v.Status {
		case escrow.Refunded:
			mains[ids[0]] += money.Naira(1000) - 2492
			mains[ids[1]] += money.Naira(1000) - 2492
			mains[ids[2]] += money.Naira(1010) - 2516
		case escrow.Completed:
			mains[v.WinnerID] += money.Naira(3010 - 75)
		default:
			t.Fatalf("round %d: status %s", round, v.Status)
		}
		for _, cid := range ids {
			if w := walletOf(t, b, cid); w.Main != mains[cid] || w.Escrow != 0 {
				t.Fatalf("round %d (%s): wallet %s %+v, want main %s", round, v.Status, cid, w, mains[cid])
			}
		}
	}
}

// Each participant's wallet posting names that participant's own stake
// record.
func TestVaultPostingsNameEachParticipantsRecord(t *testing.T) {
	ctx := context.Background()
	a, _, store, actor := twoInstances(t)
	ids := fundedCustomers(t, a, actor, "p", 2, 5000)
	res, err := a.CreateVault(ctx, actor, draftOf(ids, 600, 400))
	if err != nil {
		t.Fatal(err)
	}
	for _, cid := range ids {
		evs, err := store.ReadStream(ctx, WalletKind.StreamName(cid), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := WalletKind.Registry.Decode(evs[len(evs)-1].Type, evs[len(evs)-1].Data)
		if err != nil {
			t.Fatal(err)
		}
		if p := ev.(wallet.Posted); p.TransactionID != recordids.Derived(res.Escrow.CreatedAt, res.Escrow.ID+"/stake-"+cid) || p.Reference != "ESC-"+res.Escrow.ID+"-stake-"+cid {
			t.Fatalf("posting of %s: %+v", cid, p)
		}
	}
}

// Vaults over the same ten wallets at once on one instance queue for
// their wallets (walletLocks) instead of losing appends to each other:
// every create and every winner succeeds at its first or second attempt.
// Without the locks most give up contended.
func TestVaultsSharingWalletsQueueInOneProcess(t *testing.T) {
	ctx := context.Background()
	a, _, _, actor := twoInstances(t)
	ids := fundedCustomers(t, a, actor, "q", 10, 20000)
	a.Engine.MaxAttempts = 2
	const n = 12
	naira := []int64{100, 100, 100, 100, 100, 100, 100, 100, 100, 100}
	tokens := make([]string, n)
	got := raceOnTwo(a, a, n, func(i int, svc *Service) error {
		res, err := svc.CreateVault(ctx, actor, draftOf(ids, naira...))
		tokens[i] = res.Escrow.ID
		return err
	})
	if !reflect.DeepEqual(got, map[string]int{"ok": n}) {
		t.Fatalf("creates: %v", got)
	}
	got = raceOnTwo(a, a, n, func(i int, svc *Service) error {
		_, err := svc.DeclareVaultWinner(ctx, actor, tokens[i], ids[i%10])
		return err
	})
	if !reflect.DeepEqual(got, map[string]int{"ok": n}) {
		t.Fatalf("winners: %v", got)
	}
	var sum money.Amount
	for _, id := range ids {
		w := walletOf(t, a, id)
		if w.Escrow != 0 {
			t.Fatalf("wallet %s %+v", id, w)
		}
		sum += w.Main
	}
	if sum != money.Naira(200000-n*25) {
		t.Fatalf("participants hold %s", sum)
	}
}

// readHook runs before and after each read of one stream (n counts them,
// from 1).
type readHook struct {
	eventstore.Store
	stream        string
	n             int
	before, after func(n int)
}

func (s *readHook) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	if stream != s.stream {
		return s.Store.ReadStream(ctx, stream, from, limit)
	}
	s.n++
	s.before(s.n)
	defer s.after(s.n)
	return s.Store.ReadStream(ctx, stream, from, limit)
}

// A winner that read the vault open and then a participant's wallet
// after another instance cancelled the vault in between: its wallet check
// refuses the payout, and the winner decides again on fresh state and
// answers that the vault is settled, not "Insufficient balance".
func TestVaultWinnerReadingAcrossACancel(t *testing.T) {
	ctx := context.Background()
	a, _, store, actor := twoInstances(t)
	ids := fundedCustomers(t, a, actor, "x", 2, 5000)
	res, err := a.CreateVault(ctx, actor, draftOf(ids, 600, 400))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Escrow.ID
	hook := &readHook{Store: store, stream: WalletKind.StreamName(ids[0])}
	b := NewService(NewEngine(hook, 100))
	hook.after = func(n int) {
		if n == 1 { // the first attempt read the wallet: make its append conflict
			if _, err := a.Engine.Do(ctx, actor.meta(), func(tx *Tx) error {
				Append(tx, WalletKind, ids[0], wallet.Posted{TransactionID: "bump", Reference: "bump", At: time.Now()})
				return nil
			}); err != nil {
				t.Error(err)
			}
		}
	}
	hook.before = func(n int) {
		if n == 2 { // the second read the vault open; it is cancelled before the wallet is read
			if _, err := a.CancelVault(ctx, actor, id); err != nil {
				t.Error(err)
			}
		}
	}
	_, err = b.DeclareVaultWinner(ctx, actor, id, ids[0])
	if !errors.Is(err, escrow.ErrVaultSettled) || hook.n != 2 {
		t.Fatalf("winner after a cancel: %v (wallet read %d times)", err, hook.n)
	}
	for i, want := range []money.Amount{money.Naira(5000) - 1500, money.Naira(5000) - 1000} { // fee 25: shares 15, 10
		if w := walletOf(t, a, ids[i]); w.Main != want || w.Escrow != 0 {
			t.Fatalf("wallet %d %+v, want main %s", i, w, want)
		}
	}
}
