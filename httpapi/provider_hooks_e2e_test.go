package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/gateway/paystackgw"
)

const hookSecret = "sk_test_hooks_e2e"

// paystackRail is a payout rail as Paystack behaves: every transfer is
// accepted (pending) under a reference derived from the record id, and
// its outcome, once the test sets it, is what verifying the transfer
// answers.
type paystackRail struct {
	mu      sync.Mutex
	sent    []string // references, in send order
	polls   map[string]int
	outcome map[string]payment.PayoutAnswer
}

func newPaystackRail() *paystackRail {
	return &paystackRail{polls: map[string]int{}, outcome: map[string]payment.PayoutAnswer{}}
}

func (r *paystackRail) Reference(w ledger.Record) string { return "wd_" + w.ID }

func (r *paystackRail) Send(_ context.Context, w ledger.Record, _ string) (payment.PayoutAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, r.Reference(w))
	return payment.PayoutAnswer{Status: payment.ProviderPending, Transfer: "TRF_" + w.ID}, nil
}

func (r *paystackRail) Status(_ context.Context, w ledger.Record) (payment.PayoutAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := r.Reference(w)
	r.polls[ref]++
	if a, ok := r.outcome[ref]; ok {
		return a, nil
	}
	return payment.PayoutAnswer{}, errors.New("provider timed out")
}

func (r *paystackRail) settle(ref string, a payment.PayoutAnswer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcome[ref] = a
}

func (r *paystackRail) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[len(r.sent)-1]
}

func (r *paystackRail) pollsOf(ref string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.polls[ref]
}

// paystackOn makes svc's test environment pay out through rail and read
// Paystack's events signed with hookSecret.
func paystackOn(svc *app.Service, rail *paystackRail) {
	svc.Gateways[domain.Test] = gateway.Set{Collection: gateway.TestCollection{}, Payouts: rail,
		Events: paystackgw.Events{SecretKey: hookSecret}}
}

func signed(body string) string {
	m := hmac.New(sha512.New, []byte(hookSecret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

func transferEvent(name, ref string, id int, status string) string {
	return fmt.Sprintf(`{"event":%q,"data":{"id":%d,"reference":%q,"status":%q,"amount":100000,"currency":"NGN","transfer_code":"TRF_x"}}`,
		name, id, ref, status)
}

// hook posts body to the Paystack endpoint with signature, on the
// harness's server or (url not empty) another instance.
func (h *harness) hook(url, env, body, signature string) resp {
	h.t.Helper()
	if url == "" {
		url = h.srv.URL
	}
	hr, err := http.NewRequest("POST", url+"/hooks/paystack/"+env, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(paystackgw.SignatureHeader, signature)
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := resp{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if err := json.Unmarshal(raw, &out.Env); err == nil {
		out.Message, _ = out.Env["message"].(string)
		out.Data = out.Env["data"]
	}
	return out
}

// inboxRow is an event's row in the inbox: state, deliveries, attempts.
func (h *harness) inboxRow(id string) (state string, deliveries, attempts int, outcome string) {
	h.t.Helper()
	err := h.pool.QueryRow(context.Background(), `SELECT state, deliveries, attempts, coalesce(outcome, '') FROM provider_inbox
		WHERE provider = 'paystack' AND event_id = $1`, id).Scan(&state, &deliveries, &attempts, &outcome)
	if err != nil {
		h.t.Fatalf("inbox row %s: %v", id, err)
	}
	return state, deliveries, attempts, outcome
}

func (h *harness) inboxCount() int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM provider_inbox`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// processed waits until the worker has processed event id.
func (h *harness) processed(id string) string {
	h.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		state, _, _, outcome := h.inboxRow(id)
		if state == "done" {
			return outcome
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("event %s still %s", id, state)
		}
	}
}

// failedAttempt waits until an attempt at event id has failed: a claim
// counts the attempt when it starts, its error is recorded when it ends.
func (h *harness) failedAttempt(id string) {
	h.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var failed bool
		if err := h.pool.QueryRow(context.Background(), `SELECT last_error IS NOT NULL FROM provider_inbox
			WHERE provider = 'paystack' AND event_id = $1`, id).Scan(&failed); err != nil {
			h.t.Fatalf("inbox row %s: %v", id, err)
		}
		if failed {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no attempt at event %s has failed", id)
		}
	}
}

// pendingWithdrawal stages and verifies a withdrawal of 1,000 (fee 50)
// for cid; the rail accepts it, so it stays pending with the debit
// standing. It returns the provider's reference.
func (h *harness) pendingWithdrawal(rail *paystackRail, cid, ref string) string {
	h.t.Helper()
	h.intent(cid, bankWithdrawal(ref, 1000, nuban(h.t, "058", "12", false))).expect(h.t, 201, "")
	if rec := h.verify(cid, ref).expect(h.t, 200, "").obj(); rec["status"] != "pending" {
		h.t.Fatalf("verified withdrawal %v, want pending", rec)
	}
	return rail.last()
}

func (h *harness) paymentEventTypes(ref string) map[string]int {
	h.t.Helper()
	evs, err := h.store.ReadStream(context.Background(), "payment-"+payment.StreamID(h.m.MerchantID, domain.Test, ref), 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs {
		out[e.Type]++
	}
	return out
}

// A payout the provider accepted stays pending until its event: a forged
// event is refused and kept nowhere; a signed one is kept, acknowledged and
// processed once however often it is delivered; the money moves on the
// provider's verify answer, not on the event's body.
func TestPaystackTransferEvents(t *testing.T) {
	h := newHarness(t)
	rail := newPaystackRail()
	paystackOn(h.svc, rail)
	cid := h.funded("hooks@x.com", "08031119001", 10000)

	// Failed: the debit returns once, status failed.
	failedRef := h.pendingWithdrawal(rail, cid, "wd-failed")
	h.expectWallet(cid, 8950, 0)
	body := transferEvent("transfer.failed", failedRef, 101, "failed")
	h.hook("", "test", body, signed(body+" ")).expect(t, 401, "Invalid signature")
	h.hook("", "test", body, "").expect(t, 401, "Invalid signature")
	h.hook("", "test", body, signed(body)[:64]).expect(t, 401, "Invalid signature")
	if n := h.inboxCount(); n != 0 {
		t.Fatalf("%d events kept from forged deliveries", n)
	}
	h.expectWallet(cid, 8950, 0)
	rail.settle(failedRef, payment.PayoutAnswer{Status: payment.ProviderFailed, Reason: "Could not credit account"})
	h.hook("", "test", body, signed(body)).expect(t, 200, "Event received")
	h.processed("transfer.failed:101")
	h.hook("", "test", body, signed(body)).expect(t, 200, "Event received")
	if state, deliveries, attempts, _ := h.inboxRow("transfer.failed:101"); state != "done" || deliveries != 2 || attempts != 1 {
		t.Fatalf("inbox row %s, %d deliveries, %d attempts; want done, 2, 1", state, deliveries, attempts)
	}
	h.caughtUp()
	h.expectWallet(cid, 10000, 0)
	if rec := h.verify(cid, "wd-failed").expect(t, 200, "").obj(); rec["status"] != "failed" {
		t.Fatalf("withdrawal %v, want failed", rec)
	}

	// An event whose body lies: it says success, the provider says the
	// transfer is still pending. Nothing moves; the poll finds it later.
	lyingRef := h.pendingWithdrawal(rail, cid, "wd-lying")
	h.expectWallet(cid, 8950, 0)
	rail.settle(lyingRef, payment.PayoutAnswer{Status: payment.ProviderPending})
	body = transferEvent("transfer.success", lyingRef, 102, "success")
	h.hook("", "test", body, signed(body)).expect(t, 200, "")
	h.processed("transfer.success:102")
	h.caughtUp()
	if rec := h.verify(cid, "wd-lying").expect(t, 200, "").obj(); rec["status"] != "pending" {
		t.Fatalf("withdrawal settled on a lying event: %v", rec)
	}
	h.expectWallet(cid, 8950, 0)

	// Success, then a reversal of the same transfer: two events, the
	// debit returned once.
	okRef := h.pendingWithdrawal(rail, cid, "wd-ok")
	rail.settle(okRef, payment.PayoutAnswer{Status: payment.ProviderSucceeded})
	body = transferEvent("transfer.success", okRef, 103, "success")
	h.hook("", "test", body, signed(body)).expect(t, 200, "")
	h.processed("transfer.success:103")
	h.caughtUp()
	if rec := h.verify(cid, "wd-ok").expect(t, 200, "").obj(); rec["status"] != "success" {
		t.Fatalf("withdrawal %v, want success", rec)
	}
	h.expectWallet(cid, 7900, 0)
	rail.settle(okRef, payment.PayoutAnswer{Status: payment.ProviderReversed})
	body = transferEvent("transfer.reversed", okRef, 103, "reversed")
	for range 2 {
		h.hook("", "test", body, signed(body)).expect(t, 200, "")
	}
	h.processed("transfer.reversed:103")
	h.caughtUp()
	h.expectWallet(cid, 8950, 0)
	if got := h.paymentEventTypes("wd-ok"); got["payment.payout_reversed"] != 1 || got["payment.payout_completed"] != 1 {
		t.Fatalf("events of wd-ok %v", got)
	}

	// Events this service does not act on, or about payouts it did not
	// make, are kept and acknowledged.
	body = `{"event":"customeridentification.success","data":{"customer_code":"CUS_1"}}`
	h.hook("", "test", body, signed(body)).expect(t, 200, "")
	body = transferEvent("transfer.success", "someone-elses", 104, "success")
	h.hook("", "test", body, signed(body)).expect(t, 200, "")
	if out := h.processed("transfer.success:104"); out != `no withdrawal here is paid out by "someone-elses"` {
		t.Fatalf("outcome %q", out)
	}
	// Live has no provider configured: refused, nothing kept.
	before := h.inboxCount()
	h.hook("", "live", body, signed(body)).expect(t, 400, "Payments are not configured for this environment")
	h.hook("", "staging", body, signed(body)).expect(t, 404, "")
	if h.inboxCount() != before {
		t.Fatal("an event was kept for an environment without a provider")
	}
}

// An event whose verify the provider does not answer is retried with
// backoff, shows as failing, and does not hold up the events after it.
func TestPaystackEventRetriedWithoutBlockingOthers(t *testing.T) {
	h := newHarness(t)
	rail := newPaystackRail()
	paystackOn(h.svc, rail)
	cid := h.funded("retry@x.com", "08031119002", 10000)
	stuck := h.pendingWithdrawal(rail, cid, "wd-stuck")
	next := h.pendingWithdrawal(rail, cid, "wd-next")
	h.expectWallet(cid, 7900, 0)
	body := transferEvent("transfer.failed", stuck, 201, "failed") // the provider does not answer its verify
	h.hook("", "test", body, signed(body)).expect(t, 200, "")
	rail.settle(next, payment.PayoutAnswer{Status: payment.ProviderFailed})
	body = transferEvent("transfer.failed", next, 202, "failed")
	h.hook("", "test", body, signed(body)).expect(t, 200, "")
	h.processed("transfer.failed:202")
	h.caughtUp()
	h.expectWallet(cid, 8950, 0)
	h.failedAttempt("transfer.failed:201")
	state, _, attempts, _ := h.inboxRow("transfer.failed:201")
	if state != "pending" || attempts < 1 || rail.pollsOf(stuck) < 1 {
		t.Fatalf("stuck event %s after %d attempts (%d polls)", state, attempts, rail.pollsOf(stuck))
	}
	sum, err := h.api.ProviderEvents().Store.Status(context.Background())
	if err != nil || sum.Pending != 1 || len(sum.Failing) != 1 || sum.Failing[0].ID != "transfer.failed:201" || sum.Failing[0].LastError == "" {
		t.Fatalf("inbox status %+v, %v", sum, err)
	}
	if !sum.Failing[0].DueAt.After(time.Now()) {
		t.Fatalf("a failed event is due again at once: %v", sum.Failing[0].DueAt)
	}
}

// The same event delivered concurrently to two API instances over one
// database, each running its worker, moves money once.
func TestPaystackEventOnTwoInstancesMovesMoneyOnce(t *testing.T) {
	h := newHarness(t)
	rail := newPaystackRail()
	paystackOn(h.svc, rail)
	other := wired.API(Config{DefaultEnvironment: domain.Test, MaxReadyHorizon: time.Minute},
		h.store, h.pool, h.runner, nil, nil)
	t.Cleanup(other.Close)
	paystackOn(other.App(), rail)
	srv := httptest.NewServer(other.Handler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = other.ProviderEvents().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	cid := h.funded("race@x.com", "08031119003", 10000)
	ref := h.pendingWithdrawal(rail, cid, "wd-race")
	h.expectWallet(cid, 8950, 0)
	rail.settle(ref, payment.PayoutAnswer{Status: payment.ProviderReversed})
	body := transferEvent("transfer.reversed", ref, 301, "reversed")
	var wg sync.WaitGroup
	start := make(chan struct{})
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			url := ""
			if i%2 == 1 {
				url = srv.URL
			}
			codes[i] = h.hook(url, "test", body, signed(body)).Status
		}()
	}
	close(start)
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("delivery %d answered %d", i, c)
		}
	}
	h.processed("transfer.reversed:301")
	// Both workers may have processed it (one after the other's lease
	// ran out); the money rules moved it once.
	_, _ = other.ProviderEvents().Drain(context.Background())
	_, _ = h.api.ProviderEvents().Drain(context.Background())
	h.caughtUp()
	h.expectWallet(cid, 10000, 0)
	if got := h.paymentEventTypes("wd-race"); got["payment.payout_reversed"] != 1 || got["payment.payout_failed"] != 0 {
		t.Fatalf("events of wd-race %v", got)
	}
	if _, deliveries, _, _ := h.inboxRow("transfer.reversed:301"); deliveries != 8 {
		t.Fatalf("%d deliveries counted, want 8", deliveries)
	}
}

// Merchants hear of each outcome once: a failure, and a success later
// reversed (two announcements, the money returned once); a payout still
// pending announces nothing.
func TestPaystackPayoutOutcomesAnnounced(t *testing.T) {
	h := newWebhookHarness(t)
	rail := newPaystackRail()
	paystackOn(h.svc, rail)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")
	cid := h.funded("announce@x.com", "08031119004", 10000)
	failed := h.pendingWithdrawal(rail, cid, "wd-a-failed")
	paid := h.pendingWithdrawal(rail, cid, "wd-a-paid")
	h.pendingWithdrawal(rail, cid, "wd-a-pending")
	for i, step := range []struct {
		ref, event string
		status     payment.ProviderStatus
	}{
		{failed, "transfer.failed", payment.ProviderFailed},
		{paid, "transfer.success", payment.ProviderSucceeded},
		{paid, "transfer.reversed", payment.ProviderReversed},
	} {
		rail.settle(step.ref, payment.PayoutAnswer{Status: step.status})
		body := transferEvent(step.event, step.ref, 400+i, string(step.status))
		h.hook("", "test", body, signed(body)).expect(t, 200, "")
		h.processed(fmt.Sprintf("%s:%d", step.event, 400+i))
	}
	h.caughtUp()
	h.expectWallet(cid, 10000-1050, 0) // only the pending one stays debited
	got := map[string]int{}
	for _, hit := range h.allWebhooks(rc) {
		if strings.HasPrefix(hit.Event, "payment.withdrawal.") {
			got[hit.Event+" "+fmt.Sprint(hit.Data["reference"])]++
		}
	}
	want := map[string]int{"payment.withdrawal.failed wd-a-failed": 1, "payment.withdrawal.success wd-a-paid": 1,
		"payment.withdrawal.reversed wd-a-paid": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("announcements %v, want %v", got, want)
	}
}
