package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// Deadlines end to end: escrows created and paid through the API, the
// deadlines projector building the deadlines read model, and the
// scheduler serve runs acting on them, in simulated time (the engine's
// clock; nothing sleeps).

// fakeClock is the engine's clock, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

// useFakeClock makes the harness's engine run on a fake clock starting now.
func (h *harness) useFakeClock() *fakeClock {
	c := &fakeClock{at: time.Now().UTC()}
	h.svc.Engine.Now = c.Now
	return c
}

// scheduler is the deadline scheduler serve runs, over svc.
func (h *harness) scheduler(svc *app.Service) *app.DeadlineScheduler {
	s := wired.Deadlines(svc, projections.NewQueries(h.pool, nil), zap.NewNop())
	s.RemoveFiles = h.api.Files().Remove // as serve has it
	return s
}

// round runs one scheduler round once the read models have caught up,
// and checks what took effect, by kind.
func (h *harness) round(s *app.DeadlineScheduler, want app.Acted) {
	h.t.Helper()
	h.caughtUp()
	got, err := s.Round(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		h.t.Fatalf("the round acted on %v, want %v", got, want)
	}
}

var (
	none     = app.Acted{}
	released = app.Acted{escrow.AutoReleaseDeadline: 1}
	expired  = app.Acted{escrow.ExpiryDeadline: 1}
	reminded = func(n int) app.Acted { return app.Acted{escrow.WindowEndingDeadline: n} }
)

// streamEvents are the types and actors of an escrow's events, in order.
func (h *harness) streamEvents(id string) (types, actors []string) {
	h.t.Helper()
	evs, err := h.store.ReadStream(context.Background(), "escrow-"+id, 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range evs {
		var m domain.Meta
		if err := json.Unmarshal(e.Metadata, &m); err != nil {
			h.t.Fatal(err)
		}
		types, actors = append(types, e.Type), append(actors, m.Actor)
	}
	return types, actors
}

// autoReleaseEscrow creates a 10,000 auto-release escrow with a
// one-minute window, sold by seller, and has buyer pay it (10,250).
func (h *harness) autoReleaseEscrow(seller, buyer, ref string) (id, token string) {
	h.t.Helper()
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"maxDelivery": "1", "deliveryTimeline": "minutes", "autoRelease": "true"}, 0).expect(h.t, 201, "Escrow created successfully").obj()
	if e["autoRelease"] != true || e["nextDeadline"] != nil {
		h.t.Fatalf("created %v: want autoRelease and no deadline before payment", e)
	}
	id, token = e["id"].(string), e["paymentToken"].(string)
	h.pay(buyer, ref, 10250, id).expect(h.t, 200, "Payment successful")
	return id, token
}

func TestAutoReleaseEndToEnd(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 20000)
	sched := h.scheduler(h.svc)
	id, token := h.autoReleaseEscrow(seller, buyer, "ar-1")
	// A second escrow without auto-release stays as it is.
	plain := h.createEscrow(seller, map[string]string{"amount": "5000", "purpose": "Case", "whoPays": "buyer",
		"maxDelivery": "1", "deliveryTimeline": "minutes"}, 0).expect(t, 201, "Escrow created successfully").obj()
	h.pay(buyer, "ar-2", 5125, plain["id"]).expect(t, 200, "Payment successful")

	v := h.viewEscrow(token, "")
	dl, _ := v["nextDeadline"].(map[string]any)
	if v["status"] != "ONGOING" || dl == nil || dl["type"] != "auto_release" {
		t.Fatalf("paid escrow %v: want an auto_release deadline", v)
	}
	due, err := time.Parse(time.RFC3339Nano, dl["at"].(string))
	if err != nil || !due.Equal(clock.Now().Add(time.Minute).Truncate(time.Microsecond)) && !due.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("deadline at %v (%v), want a minute after payment %v", dl["at"], err, clock.Now())
	}
	if pv := h.viewEscrow(plain["paymentToken"].(string), ""); pv["nextDeadline"] != nil || pv["autoRelease"] != false {
		t.Fatalf("escrow without auto-release: %v", pv)
	}

	// Before the window elapses nothing but the half-way reminders (a
	// window shorter than a day) happens.
	clock.Advance(59 * time.Second)
	h.round(sched, reminded(2))
	h.expectWallet(buyer, 20000-10250-5125, 10250+5125)

	// The window elapses: released as the buyer's confirmation would.
	clock.Advance(2 * time.Second)
	h.round(sched, released)
	v = h.viewEscrow(token, "")
	if v["status"] != "COMPLETED" || v["state"] != "CLOSED" || v["nextDeadline"] != nil {
		t.Fatalf("after the window: %v", v)
	}
	h.expectWallet(buyer, 20000-10250-5125, 5125)
	h.expectWallet(seller, 10000, 0)
	h.expectMerchant(125, 0)
	h.expectPlatform(125)
	types, actors := h.streamEvents(id)
	if last := len(types) - 1; types[last] != "escrow.released" || actors[last] != app.SystemAgent {
		t.Fatalf("escrow events %v by %v: want a release by the system last", types, actors)
	}

	// Once: later rounds, and the buyer's late confirmation, move nothing.
	clock.Advance(time.Hour)
	h.round(sched, none)
	h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + id, key: h.std(), cid: buyer}).expect(t, 400, "Action not allowed")
	h.expectWallet(seller, 10000, 0)
	if pv := h.viewEscrow(plain["paymentToken"].(string), ""); pv["status"] != "ONGOING" {
		t.Fatalf("escrow without auto-release after the window: %v", pv)
	}
	var rows int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM rm_escrow_deadlines`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d deadlines left (%v)", rows, err)
	}
	h.assertZeroSum()
}

// A dispute opened before the window elapses stops the auto-release.
func TestAutoReleaseSkipsADisputedEscrow(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	sched := h.scheduler(h.svc)
	_, token := h.autoReleaseEscrow(seller, buyer, "ard-1")
	h.submitDispute(token, buyer, "It never came").expect(t, 200, "")
	clock.Advance(2 * time.Minute)
	h.round(sched, none)
	if v := h.viewEscrow(token, ""); v["status"] != "DISPUTED" || v["nextDeadline"] != nil {
		t.Fatalf("disputed escrow after the window: %v", v)
	}
	h.expectWallet(buyer, 0, 10250)
	h.expectWallet(seller, 0, 0)
}

// A buyer's confirmation, a buyer's dispute, the merchant's partial
// refund and two schedulers (two API processes) all at the instant the
// window elapses: the escrow settles once, or is disputed and not
// settled; a refund lands only before a settlement, and money moves once.
func TestAutoReleaseRacesConfirmDisputeAndRefund(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	const n = 8
	buyer := h.funded("b@x.com", "08035551002", 10250*n)
	other := app.NewService(app.NewEngine(h.store, 1000))
	other.Engine.Now = clock.Now
	scheds := []*app.DeadlineScheduler{h.scheduler(h.svc), h.scheduler(other)}
	type esc struct{ id, token string }
	var escrows []esc
	for i := range n {
		id, token := h.autoReleaseEscrow(seller, buyer, fmt.Sprintf("race-%d", i))
		escrows = append(escrows, esc{id, token})
	}
	clock.Advance(time.Minute)
	h.caughtUp()
	var wg sync.WaitGroup
	start := make(chan struct{})
	acted := make([]app.Acted, len(scheds))
	for i, s := range scheds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n, err := s.Round(context.Background())
			if err != nil {
				t.Error(err)
			}
			acted[i] = n
		}()
	}
	race := func(what string, call func() resp) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if r := call(); r.Status != 200 && r.Status != 400 {
				t.Errorf("%s: %d %s", what, r.Status, r.Raw)
			}
		}()
	}
	for i, e := range escrows {
		if i%2 == 0 { // half the escrows race a dispute too
			race("dispute", func() resp { return h.submitDispute(e.token, buyer, "Wrong colour") })
		}
		if i%4 < 2 { // half of each kind race a refund of 1,000 too
			race("refund", func() resp { return h.partialRefund(e.id, 1000, nil) })
		}
		race("confirm", func() resp {
			return h.do(req{method: "POST", path: "/v1/escrow/confirm-payment/" + e.id, key: h.std(), cid: buyer})
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	completed, disputed := 0, 0
	var refunded, sellerGot, stillHeld money.Amount
	for _, e := range escrows {
		types, _ := h.streamEvents(e.id)
		settled, refunds, settledAt := 0, 0, -1
		for i, typ := range types {
			switch typ {
			case "escrow.released":
				settled++
				settledAt = i
			case "escrow.partially_refunded":
				refunds++
				if settledAt >= 0 {
					t.Errorf("escrow %s refunded after its release: %v", e.id, types)
				}
			}
		}
		if refunds > 1 {
			t.Errorf("escrow %s refunded %d times: %v", e.id, refunds, types)
		}
		back := money.Naira(1000) * money.Amount(refunds)
		refunded += back
		switch v := h.viewEscrow(e.token, ""); v["status"] {
		case "COMPLETED":
			completed++
			sellerGot += money.Naira(10000) - back
			if settled != 1 {
				t.Errorf("escrow %s completed by %d releases: %v", e.id, settled, types)
			}
		case "DISPUTED":
			disputed++
			stillHeld += money.Naira(10250) - back
			if settled != 0 {
				t.Errorf("disputed escrow %s released: %v", e.id, types)
			}
		default:
			t.Errorf("escrow %s ended %v", e.id, v["status"])
		}
	}
	t.Logf("%d completed, %d disputed, %s refunded; schedulers released %v", completed, disputed, refunded, acted)
	// Money moved once per settled escrow and refund, and only for those.
	h.expectWallet(buyer, refunded, stillHeld)
	h.expectWallet(seller, sellerGot, 0)
	h.expectMerchant(125*completed, 0)
	h.expectPlatform(125 * completed)
	if acted[0][escrow.AutoReleaseDeadline]+acted[1][escrow.AutoReleaseDeadline] > completed {
		t.Fatalf("schedulers report %v releases, %d escrows completed", acted, completed)
	}
	// Whatever is left is not acted on again.
	clock.Advance(time.Hour)
	for _, s := range scheds {
		h.round(s, none)
	}
	h.expectWallet(seller, sellerGot, 0)
	h.assertZeroSum()
}

func TestUnpaidExpiryEndToEnd(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	sched := h.scheduler(h.svc)
	for _, bad := range []string{"0", "721", "-1", "soon"} {
		h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer", "expiresInHours": bad}, 0).
			expect(t, 400, "expiresInHours must be an integer between 1 and 720")
	}
	var images []string
	create := func() (string, string) {
		e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
			"expiresInHours": "2"}, 1).expect(t, 201, "Escrow created successfully").obj()
		dl, _ := e["nextDeadline"].(map[string]any)
		if dl == nil || dl["type"] != "unpaid_expiry" {
			t.Fatalf("created %v: want an unpaid_expiry deadline", e)
		}
		images = append(images, e["imageUrl"].([]any)[0].(string))
		return e["id"].(string), e["paymentToken"].(string)
	}
	unpaid, unpaidToken := create()
	paid, paidToken := create()
	for _, u := range images {
		h.expectFile(u, http.StatusOK)
	}
	h.pay(buyer, "exp-1", 10250, paid).expect(t, 200, "Payment successful")
	if v := h.viewEscrow(paidToken, ""); v["nextDeadline"] != nil {
		t.Fatalf("paid escrow keeps its expiry: %v", v)
	}

	clock.Advance(2*time.Hour - time.Second)
	h.round(sched, none)
	h.viewEscrow(unpaidToken, "")
	clock.Advance(time.Second)
	h.round(sched, expired)
	h.do(req{path: "/v1/escrow/verify/" + unpaidToken, key: h.std()}).expect(t, 400, "Escrow not found")
	types, actors := h.streamEvents(unpaid)
	if last := len(types) - 1; types[last] != "escrow.deleted" || actors[last] != app.SystemAgent {
		t.Fatalf("expired escrow events %v by %v: want a deletion by the system last", types, actors)
	}
	// The expired escrow's image is gone with it; the paid escrow is
	// untouched; nothing acts twice.
	h.expectFile(images[0], http.StatusNotFound)
	h.expectFile(images[1], http.StatusOK)
	if v := h.viewEscrow(paidToken, ""); v["status"] != "ONGOING" {
		t.Fatalf("paid escrow after the expiry: %v", v)
	}
	h.round(sched, none)
	h.expectWallet(buyer, 0, 10250)
}

// A deadline that passes while no process runs (projectors and API both
// stopped) is acted on once by the first round after they start again: it
// lives in the events and the read model, not in a timer.
func TestDeadlineDueWhileStoppedActsOnceAfterStart(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	h.caughtUp()
	// The projectors stop before the payment: its deadline is in the log
	// only. The old API process stops too (its scheduler never runs).
	h.projecting.stop()
	id, _ := h.autoReleaseEscrow(seller, buyer, "rs-1")
	clock.Advance(3 * time.Hour)

	// Start: a new process (a new engine, nothing cached) and the
	// projectors from their checkpoints.
	restarted := func() *app.Service {
		s := app.NewService(app.NewEngine(h.store, 1000))
		s.Engine.Now = clock.Now
		return s
	}
	h.projecting.start()
	// The reminder (half-way) and the release both passed while stopped.
	h.round(h.scheduler(restarted()), app.Acted{escrow.WindowEndingDeadline: 1, escrow.AutoReleaseDeadline: 1})
	// A second start acts on nothing.
	h.round(h.scheduler(restarted()), none)
	types, _ := h.streamEvents(id)
	released := 0
	for _, typ := range types {
		if typ == "escrow.released" {
			released++
		}
	}
	if released != 1 {
		t.Fatalf("escrow events %v: want one release", types)
	}
	h.expectWallet(buyer, 0, 0)
	h.expectWallet(seller, 10000, 0)
	h.assertZeroSum()
}

// The buyer extends the window: the auto-release (and the seller's claim)
// waits for the new one; the limits hold.
func TestExtendWindowEndToEnd(t *testing.T) {
	h := newHarness(t)
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	sched := h.scheduler(h.svc)
	e := h.createEscrow(seller, map[string]string{"amount": "10000", "purpose": "Phone", "whoPays": "buyer",
		"maxDelivery": "2", "deliveryTimeline": "minutes", "autoRelease": "true"}, 0).expect(t, 201, "Escrow created successfully").obj()
	id, token := e["id"].(string), e["paymentToken"].(string)
	extend := func(cid string, by any) resp {
		return h.do(req{method: "POST", path: "/v1/escrow/extend-window/" + token, key: h.std(), cid: cid, body: map[string]any{"by": by}})
	}
	extend(buyer, 1).expect(t, 400, "Action not allowed") // unpaid
	paidAt := clock.Now()
	h.pay(buyer, "ext-1", 10250, id).expect(t, 200, "Payment successful")
	extend(seller, 1).expect(t, 400, "Action not allowed")
	extend(buyer, 0).expect(t, 400, "by must be a positive integer")
	extend(buyer, 3).expect(t, 400, "Extensions may add at most the original window in total")
	v := extend(buyer, 1).expect(t, 200, "Delivery window extended successfully").obj()
	dl := v["nextDeadline"].(map[string]any)
	if at, _ := time.Parse(time.RFC3339Nano, dl["at"].(string)); !at.Equal(paidAt.Add(3*time.Minute).Truncate(time.Microsecond)) &&
		!at.Equal(paidAt.Add(3*time.Minute)) {
		t.Fatalf("deadline after the extension %v, want %v", dl["at"], paidAt.Add(3*time.Minute))
	}
	extend(buyer, 1).expect(t, 200, "Delivery window extended successfully")
	extend(buyer, 1).expect(t, 400, "The delivery window can be extended at most 2 times")

	// The original window passes: nothing; the extended one: released.
	// Its reminder moved with it: half-way through the four minutes.
	clock.Advance(2*time.Minute + time.Second)
	h.round(sched, reminded(1))
	h.do(req{path: "/v1/escrow/claim-funds/" + token, key: h.std(), cid: seller}).expect(t, 400, "Escrow cannot be claimed yet")
	clock.Advance(2 * time.Minute)
	h.round(sched, released)
	if v := h.viewEscrow(token, ""); v["status"] != "COMPLETED" {
		t.Fatalf("after the extended window: %v", v)
	}
	h.expectWallet(seller, 10000, 0)
	h.expectWallet(buyer, 0, 0)
}

// A milestone escrow's pending milestones are reminded of once each, when
// their dueDate passes (escrow.milestone_due), earliest first; a released
// milestone is not, and two due at the same time are both.
func TestMilestoneDueEndToEnd(t *testing.T) {
	h := newWebhookHarness(t)
	rc := newHookReceiver(t, h.m.SigningSecrets[domain.Test], 0)
	h.do(req{method: "PUT", path: "/v1/merchant/webhook", key: h.sa(), body: map[string]any{"url": rc.srv.URL}}).expect(t, 200, "")
	clock := h.useFakeClock()
	seller := h.createCustomer(h.sa(), "s@x.com", "08035551001")
	buyer := h.funded("b@x.com", "08035551002", 10250)
	sched := h.scheduler(h.svc)
	due := func(d time.Duration) string { return clock.Now().Add(d).Format(time.RFC3339) }
	e := h.createMilestones(seller, map[string]any{"amount": 10000, "purpose": "Website", "whoPays": "buyer",
		"maxDelivery": 30, "deliveryTimeline": "days", "milestones": []map[string]any{
			{"title": "Design", "amount": 1000, "dueDate": due(time.Hour)},
			{"title": "Build", "amount": 2000, "dueDate": due(3 * time.Hour)},
			{"title": "Test", "amount": 3000, "dueDate": due(2 * time.Hour)},
			{"title": "Ship", "amount": 4000, "dueDate": due(2 * time.Hour)},
		}}).expect(t, 201, "").obj()
	id := e["id"].(string)
	ms := e["milestones"].([]any)
	h.pay(buyer, "md-1", 10250, id).expect(t, 200, "Payment successful")
	milestone := func(i int) string { return ms[i].(map[string]any)["id"].(string) }
	wantReminded := func(ids ...string) {
		t.Helper()
		var got []string
		for _, hh := range h.allWebhooks(rc) {
			if hh.Event == "escrow.milestone_due" {
				if hh.Data["id"] != id {
					t.Fatalf("milestone_due of %v", hh.Data["id"])
				}
				got = append(got, hh.ID)
			}
		}
		if len(got) != len(ids) {
			t.Fatalf("%d escrow.milestone_due webhooks, want %d", len(got), len(ids))
		}
		var reminded []string
		evs, err := h.store.ReadStream(context.Background(), "escrow-"+id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range evs {
			if re.Type == "escrow.reminded" {
				var r escrow.Reminded
				var m domain.Meta
				if err := json.Unmarshal(re.Data, &r); err != nil || json.Unmarshal(re.Metadata, &m) != nil || m.Actor != app.SystemAgent {
					t.Fatalf("reminder %s by %q (%v)", re.Data, m.Actor, err)
				}
				reminded = append(reminded, r.MilestoneID)
			}
		}
		if !reflect.DeepEqual(reminded, ids) {
			t.Fatalf("reminded of %v, want %v", reminded, ids)
		}
	}

	clock.Advance(time.Hour - time.Second)
	h.round(sched, none)
	clock.Advance(time.Second)
	h.round(sched, app.Acted{escrow.MilestoneDueDeadline: 1})
	wantReminded(milestone(0))
	h.confirmMilestone(buyer, id, milestone(0)).expect(t, 200, "")

	// Test and Ship fall due together: one reminder each, one per round
	// (the next is written by the projector from the first's event).
	clock.Advance(time.Hour)
	h.round(sched, app.Acted{escrow.MilestoneDueDeadline: 1})
	h.round(sched, app.Acted{escrow.MilestoneDueDeadline: 1})
	wantReminded(milestone(0), milestone(2), milestone(3))

	// Build, released before its dueDate, is never reminded of.
	h.confirmMilestone(buyer, id, milestone(1)).expect(t, 200, "")
	clock.Advance(2 * time.Hour)
	h.round(sched, none)
	wantReminded(milestone(0), milestone(2), milestone(3))
	var rows int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM rm_escrow_deadlines`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d deadlines left (%v)", rows, err)
	}
}

// expectFile fetches a stored file's URL and checks its status.
func (h *harness) expectFile(u string, status int) {
	h.t.Helper()
	res, err := http.Get(u)
	if err != nil {
		h.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != status {
		h.t.Fatalf("GET %s: %d, want %d", u, res.StatusCode, status)
	}
}
