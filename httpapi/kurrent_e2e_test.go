package httpapi

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
	"github.com/escrowd/escrowd/eventstore/kurrent/kurrenttest"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/webhooks"
)

// kurrentMoneyPaths are the end-to-end tests TestMoneyPathsOnKurrent runs
// again with the event log on the KurrentDB adapter (read models, outbox,
// idempotency keys and rate limits stay in PostgreSQL). A test joins with
// one line; its harness is built the same way on both stores. The list is
// the money paths, kept short: each entry runs its whole test again.
var kurrentMoneyPaths = map[string]func(*testing.T){
	"EscrowLifecycleBalances":       TestEscrowLifecycleBalances,
	"EscrowConcurrency":             TestEscrowConcurrency,
	"EscrowPaymentBatchAndIntent":   TestEscrowPaymentBatchAndIntent,
	"TopUp":                         TestTopUp,
	"DepositIntentVerify":           TestDepositIntentVerify,
	"BankWithdrawalAndReversal":     TestBankWithdrawalAndReversal,
	"WalletTransfer":                TestWalletTransfer,
	"ConcurrentDebitsNeverOverdraw": TestConcurrentDebitsNeverOverdraw,
	"ReusedReferenceMovesMoneyOnce": TestReusedReferenceMovesMoneyOnce,
	"CryptoWithdrawal":              TestCryptoWithdrawal,
	"MixedWorkloadZeroSum":          TestMixedWorkloadZeroSum,
	"WebhooksEscrowLifecycle":       TestWebhooksEscrowLifecycle,
	"DisputeRaces":                  TestDisputeRaces,
	"MilestoneLifecycleBalances":    TestMilestoneLifecycleBalances,
}

// TestMoneyPathsOnKurrent runs the money paths on the KurrentDB adapter:
// against the server KURRENTDB_URL names, or else an in-memory protocol
// server per test (kurrenttest), which proves the adapter and the service
// over it, not KurrentDB itself.
func TestMoneyPathsOnKurrent(t *testing.T) {
	for name, test := range kurrentMoneyPaths {
		t.Run(name, func(t *testing.T) { runOnKurrent(t, test) })
	}
}

// TestCategoriesOnKurrent runs the category listings on the KurrentDB
// adapter: a create and the order that places it are one append over
// several streams, which the adapter once logged in the order the command
// touched them (the order before the category) instead of the port's
// stream-name order. The newest category must list first.
func TestCategoriesOnKurrent(t *testing.T) {
	for name, test := range map[string]func(*testing.T){"CategoryLifecycle": TestCategoryLifecycle, "CategoryPaging": TestCategoryPaging} {
		t.Run(name, func(t *testing.T) { runOnKurrent(t, test) })
	}
}

// onKurrent holds the names of the tests whose harnesses use the KurrentDB
// adapter (a harness made in a subtest of one does too).
var onKurrent sync.Map

// runOnKurrent runs test with every harness it starts on the KurrentDB
// adapter.
func runOnKurrent(t *testing.T, test func(*testing.T)) {
	onKurrent.Store(t.Name(), true)
	t.Cleanup(func() { onKurrent.Delete(t.Name()) })
	test(t)
}

func usesKurrent(t *testing.T) bool {
	found := false
	onKurrent.Range(func(k, _ any) bool {
		name := k.(string)
		found = t.Name() == name || strings.HasPrefix(t.Name(), name+"/")
		return !found
	})
	return found
}

// harnessStore is the harness's event store: PostgreSQL over pool, or the
// KurrentDB adapter for a test runOnKurrent runs, behind the codec that
// seals personal fields (as every process has it), with a master key of
// the test's own; the keyring is returned for the parts of the API that
// seal with it too (the dashboard's TOTP secrets).
func harnessStore(t *testing.T, pool *pgxpool.Pool) (eventstore.Store, *keyring.Keyring) {
	t.Helper()
	var s eventstore.Store
	if !usesKurrent(t) {
		s = postgres.New(pool)
	} else {
		k, err := kurrent.Open(kurrenttest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		s = k
	}
	t.Cleanup(s.Close)
	return wired.Sealed(s, pool, testMaster(t))
}

// TestCheckpointsAcrossRestarts: the projections and the webhook
// subscriber store the positions they reached and resume after them, so
// writes made while both are down are applied and sent exactly once after
// a restart, and a restart with nothing new replays nothing; on both
// stores (KurrentDB positions are the server's, not PostgreSQL's).
func TestCheckpointsAcrossRestarts(t *testing.T) {
	t.Run("postgres", testCheckpointsAcrossRestarts)
	t.Run("kurrent", func(t *testing.T) { runOnKurrent(t, testCheckpointsAcrossRestarts) })
}

func testCheckpointsAcrossRestarts(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.WebhookAllowPrivate = true }) // the receiver is on loopback
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL + "/hooks"}}).
		expect(t, 200, "Webhook updated successfully")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d := &webhooks.Dispatcher{Pool: h.pool, Endpoints: wired.Endpoints(h.store), Sealer: wired.Sealer(h.store), AllowPrivate: true, PollInterval: 20 * time.Millisecond}
	dispatching := make(chan struct{})
	go func() { defer close(dispatching); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-dispatching })
	// startHooks runs the webhook subscriber as a new process would.
	startHooks := func() (stop func()) {
		rctx, rcancel := context.WithCancel(ctx)
		r, err := subscriberRunner(rctx, h.store, h.pool)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(rctx) }()
		return func() { rcancel(); <-done }
	}

	stopHooks := startHooks()
	first := h.funded("a@x.com", "08035550001", 1000)
	second := h.funded("b@x.com", "08035550002", 0)
	third := h.funded("c@x.com", "08035550003", 0)
	fourth := h.funded("d@x.com", "08035550004", 0)
	rc.waitFor(t, h, 1)
	stopHooks()
	h.projecting.stop()
	// Written while neither runs (a customer tops up once a day).
	h.topUp(second, 2000).expect(t, 200, "Wallet topped up successfully")
	h.topUp(third, 3000).expect(t, 200, "Wallet topped up successfully")
	h.projecting.start()
	stopHooks = startHooks()
	rc.waitFor(t, h, 3)
	h.expectWallet(second, 2000, 0)
	h.expectWallet(third, 3000, 0)
	// A restart with nothing new to apply, then one more write.
	stopHooks()
	h.projecting.stop()
	h.projecting.start()
	stopHooks = startHooks()
	defer stopHooks()
	h.topUp(fourth, 4000).expect(t, 200, "Wallet topped up successfully")
	hits := rc.waitFor(t, h, 4)
	h.expectWallet(first, 1000, 0)
	h.expectWallet(fourth, 4000, 0)

	seen := map[string]bool{}
	var amounts []float64
	for _, hh := range hits {
		if seen[hh.ID] || hh.Event != "payment.deposit.success" {
			t.Fatalf("webhooks after restarts: %+v; want each deposit once", hits)
		}
		seen[hh.ID] = true
		amounts = append(amounts, hh.Data["amount"].(float64))
	}
	slices.Sort(amounts) // the dispatcher sends different customers' in parallel
	if !slices.Equal(amounts, []float64{1000, 2000, 3000, 4000}) {
		t.Errorf("deposits sent %v; want 1000 2000 3000 4000", amounts)
	}
}

// TestRunOnKurrentUsesTheAdapter: a harness started under runOnKurrent,
// in a subtest too, has its event log on the KurrentDB adapter; others
// keep PostgreSQL.
func TestRunOnKurrentUsesTheAdapter(t *testing.T) {
	t.Run("kurrent", func(t *testing.T) {
		runOnKurrent(t, func(t *testing.T) {
			t.Run("sub", func(t *testing.T) {
				if _, ok := underCodec(newHarness(t).store).(*kurrent.Store); !ok {
					t.Error("the harness of a kurrent test is not on the KurrentDB adapter")
				}
			})
		})
	})
	t.Run("postgres", func(t *testing.T) {
		if _, ok := underCodec(newHarness(t).store).(*postgres.Store); !ok {
			t.Error("a harness outside runOnKurrent is not on PostgreSQL")
		}
	})
}

// underCodec is the adapter under the harness's sealing codec.
func underCodec(s eventstore.Store) eventstore.Store {
	return s.(interface{ Unwrap() eventstore.Store }).Unwrap()
}
