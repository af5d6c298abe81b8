package httpapi

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/webhook"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
)

// dashPages are every page a viewer may read, per environment.
var dashPages = []string{"", "/escrows", "/disputes", "/customers", "/webhooks", "/keys", "/allowlist"}

// TestDashboardPagesRenderWithTheirHeaders: every page answers for a
// logged-in viewer of each environment with the checkout's strict headers,
// marks its environment, and without a session sends to the login page.
func TestDashboardPagesRenderWithTheirHeaders(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	buyer := h.funded("b@x.com", "08035557002", 20000)
	id, _ := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	c := h.dashUser("viewer@shop.example", dashauth.Viewer)
	anon := h.dashBrowser()
	for _, env := range []string{"test", "live"} {
		for _, p := range append(dashPages, "/escrows/"+id) {
			path := "/dashboard/" + env + p
			if env == "live" && strings.HasPrefix(p, "/escrows/") {
				expectStatus(t, c.get(path), 404, "a test escrow on the live pages")
				continue
			}
			r := expectStatus(t, c.get(path), 200, path)
			if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
				t.Errorf("%s: CSP %q", path, csp)
			}
			if r.Header.Get("X-Frame-Options") != "DENY" || r.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("%s: headers %v", path, r.Header)
			}
			want := map[string]string{"test": "TEST data: no real money", "live": "LIVE data: real money"}[env]
			if !strings.Contains(r.Body, want) {
				t.Errorf("%s does not say %q", path, want)
			}
			if a := expectStatus(t, anon.get(path), 303, "anonymous "+path); a.Location != "/dashboard/login" {
				t.Errorf("anonymous %s sends to %q", path, a.Location)
			}
		}
	}
	if body := c.page("/dashboard/test/escrows/" + id); !strings.Contains(body, "escrow.disputed") && !strings.Contains(body, "escrow.dispute") {
		t.Errorf("the timeline lacks the dispute: %s", body)
	}
	expectStatus(t, c.get("/dashboard/staging"), 404, "an unknown environment")
	csv := c.get("/dashboard/test/ledger.csv")
	if csv.Status != 200 || !strings.HasPrefix(csv.Header.Get("Content-Type"), "text/csv") ||
		!strings.HasPrefix(csv.Body, "id,reference,createdAt,transactionType") || !strings.Contains(csv.Body, "pay-"+id) {
		t.Fatalf("ledger export %d %v\n%s", csv.Status, csv.Header, csv.Body)
	}
}

// TestDashboardRoleRefusals: a viewer may do nothing, support no owner's
// action; each refusal is 403 and changes nothing.
func TestDashboardRoleRefusals(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	buyer := h.funded("b@x.com", "08035557002", 20000)
	id, _ := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	keyID := h.m.Keys[0].KeyID
	viewer := h.dashUser("viewer@shop.example", dashauth.Viewer)
	support := h.dashUser("support@shop.example", dashauth.Support)
	keysBefore := len(h.merchantState().Keys)

	viewer.page("/dashboard/test/customers")
	ownerActions := map[string]url.Values{
		"/dashboard/test/keys":                      {"role": {"standard"}},
		"/dashboard/test/keys/" + keyID + "/revoke": nil,
		"/dashboard/test/webhooks/url":              {"url": {"https://example.com/hook"}},
		"/dashboard/test/webhooks/secret":           nil,
		"/dashboard/live/allowlist":                 {"entries": {"10.0.0.0/8"}},
		"/dashboard/users":                          {"email": {"new@shop.example"}, "role": {"owner"}},
	}
	supportActions := map[string]url.Values{
		"/dashboard/test/escrows/" + id + "/resolve":                                         {"status": {"REFUNDED"}},
		"/dashboard/test/customers/" + seller + "/block":                                     {"reason": {"fraud"}},
		"/dashboard/test/webhooks/deliveries/00000000-0000-7000-8000-000000000001/redeliver": nil,
	}
	for path, form := range ownerActions {
		for _, c := range []*dashClient{viewer, support} {
			c.page("/dashboard/test")
			r := expectStatus(t, c.post(path, form), 403, c.email+" "+path)
			if !strings.Contains(r.Body, "may not do this") {
				t.Errorf("%s %s: %s", c.email, path, r.Body)
			}
		}
	}
	for path, form := range supportActions {
		viewer.page("/dashboard/test")
		expectStatus(t, viewer.post(path, form), 403, "viewer "+path)
	}
	m := h.merchantState()
	if len(m.Keys) != keysBefore || m.Keys[keyID].Revoked || m.Webhooks[domain.Test] != "" || len(m.Allowlist) != 0 {
		t.Fatalf("a refused action changed the merchant: %+v", m)
	}
	users, _ := h.api.users.Users(context.Background(), h.m.MerchantID)
	if len(users) != 2 {
		t.Fatalf("users %+v", users)
	}
	if st := h.customerStatus(seller); st != "active" {
		t.Fatalf("a refused block: seller is %v", st)
	}
	if st := h.escrowStatus(id); st != "DISPUTED" {
		t.Fatalf("a refused resolution: escrow is %v", st)
	}
	// Support may do its own actions.
	support.page("/dashboard/test/customers")
	if r := expectStatus(t, support.post("/dashboard/test/customers/"+seller+"/block", url.Values{"reason": {"fraud"}}), 303, "support blocks"); r.Location != "/dashboard/test/customers?done=blocked" {
		t.Fatalf("block sends to %q", r.Location)
	}
}

// customerStatus is a customer's status in the read models, once they
// include every write so far.
func (h *harness) customerStatus(id string) string {
	h.t.Helper()
	h.caughtUp()
	c, found, err := h.api.queries.CustomerByID(context.Background(), id)
	if err != nil || !found {
		h.t.Fatalf("customer %s: %v %v", id, found, err)
	}
	return c.Status
}

// escrowStatus is an escrow's status in the read models.
func (h *harness) escrowStatus(id string) string {
	h.t.Helper()
	h.caughtUp()
	e, found, err := h.api.queries.EscrowByID(context.Background(), id)
	if err != nil || !found {
		h.t.Fatalf("escrow %s: %v %v", id, found, err)
	}
	return string(e.Status)
}

// merchantState reads the harness merchant from its stream.
func (h *harness) merchantState() merchant.State {
	h.t.Helper()
	m, err := h.svc.Merchant(context.Background(), h.m.MerchantID)
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

// TestDashboardLockout: the fifth wrong password locks the user; the right
// one is refused until the lock ends, over HTTP.
func TestDashboardLockout(t *testing.T) {
	h := newHarness(t)
	h.dashUser("ada@shop.example", dashauth.Owner)
	c := h.dashBrowser()
	login := func(password string) dashResp {
		c.page("/dashboard/login")
		return c.post("/dashboard/login", url.Values{"email": {"ada@shop.example"}, "password": {password}})
	}
	for i := 1; i < dashauth.MaxFailures; i++ {
		r := expectStatus(t, login("wrong password"), 401, "wrong password")
		if !strings.Contains(r.Body, "The email, password or code is not right") {
			t.Fatalf("attempt %d: %s", i, r.Body)
		}
	}
	r := expectStatus(t, login("wrong password"), 429, "the fifth wrong password")
	if !strings.Contains(r.Body, "locked for 15 minutes") {
		t.Fatalf("the locking answer: %s", r.Body)
	}
	expectStatus(t, login(dashPassword), 429, "the right password while locked")
	if c.cookie() != "" {
		t.Fatal("a locked login got a session")
	}
	// Once the lock has passed (moved into the past here), the password works.
	if _, err := h.pool.Exec(context.Background(), `UPDATE dashboard_users SET locked_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if r := expectStatus(t, login(dashPassword), 303, "after the lock"); r.Location != "/dashboard/code" {
		t.Fatalf("login sends to %q", r.Location)
	}
	// An unknown address answers as a wrong password does.
	c2 := h.dashBrowser()
	c2.page("/dashboard/login")
	expectStatus(t, c2.post("/dashboard/login", url.Values{"email": {"nobody@shop.example"}, "password": {dashPassword}}), 401, "unknown email")
}

// TestDashboardActionsAreEventsOfTheUser: what a user does is recorded
// with their user id as the actor, and the escrow's timeline names them.
func TestDashboardActionsAreEventsOfTheUser(t *testing.T) {
	h := newHarness(t)
	seller := h.createCustomer(h.sa(), "s@x.com", "08035557001")
	buyer := h.funded("b@x.com", "08035557002", 20000)
	id, _ := h.disputedEscrow(seller, buyer, "buyer", 0, nil, 10250)
	c := h.dashUser("support@shop.example", dashauth.Support)
	c.page("/dashboard/test/escrows/" + id)
	expectStatus(t, c.post("/dashboard/test/escrows/"+id+"/resolve", url.Values{"status": {"SPLIT"}, "sellerAmount": {"6000"},
		"buyerAmount": {"4000"}, "resolution": {"Half and half"}}), 303, "resolve")
	body := c.page("/dashboard/test/escrows/" + id + "?done=resolved")
	if !strings.Contains(body, "support@shop.example (dashboard)") || !strings.Contains(body, "The dispute is resolved.") {
		t.Fatalf("the timeline does not name the user: %s", body)
	}
	users, _ := h.api.users.Users(context.Background(), h.m.MerchantID)
	events, err := h.store.ReadStream(context.Background(), app.EscrowKind.StreamName(id), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	var meta domain.Meta
	_ = json.Unmarshal(last.Metadata, &meta)
	if meta.Actor != users[0].ID || meta.MerchantID != h.m.MerchantID || meta.Environment != domain.Test {
		t.Fatalf("the resolution's metadata %+v (user %s)", meta, users[0].ID)
	}
	h.expectWallet(buyer, 20000-10250+4000, 0)
	h.expectWallet(seller, 6000, 0)
}

// TestDashboardSessionIdles: a session unused for 30 minutes is over.
func TestDashboardSessionIdles(t *testing.T) {
	h := newHarness(t)
	c := h.dashUser("ada@shop.example", dashauth.Viewer)
	c.page("/dashboard/test")
	if _, err := h.pool.Exec(context.Background(), `UPDATE dashboard_sessions SET last_seen_at = $1`, time.Now().Add(-dashauth.IdleTimeout-time.Second)); err != nil {
		t.Fatal(err)
	}
	if r := expectStatus(t, c.get("/dashboard/test"), 303, "an idle session"); r.Location != "/dashboard/login" {
		t.Fatalf("sends to %q", r.Location)
	}
}

// TestDashboardRedeliverIsAnEventOfTheUser: redelivering a webhook from
// the dashboard is recorded with the user as the actor, on the escrow's
// timeline when the delivery is an escrow's and in the delivery's own
// stream when it is a payment's; the API's retry is the same command with
// the key as the actor; a refused redelivery records nothing.
func TestDashboardRedeliverIsAnEventOfTheUser(t *testing.T) {
	h := newWebhookHarness(t)
	rc, _, _, id := h.hookedDispute()
	var escrowHit, paymentHit hookHit
	deadline := time.Now().Add(15 * time.Second)
	for (escrowHit.ID == "" || paymentHit.ID == "") && time.Now().Before(deadline) {
		for _, hit := range rc.delivered() {
			switch {
			case hit.Event == "escrow.disputed":
				escrowHit = hit
			case hit.Event == "payment.deposit.success":
				paymentHit = hit
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if escrowHit.ID == "" || paymentHit.ID == "" {
		t.Fatalf("no escrow.disputed and payment.deposit.success among %+v", rc.delivered())
	}
	c := h.dashUser("support@shop.example", dashauth.Support)
	users, err := h.api.users.Users(context.Background(), h.m.MerchantID)
	if err != nil || len(users) != 1 {
		t.Fatalf("users %v %v", users, err)
	}
	user := users[0].ID
	redeliver := func(delivery string) dashResp {
		c.page("/dashboard/test/webhooks")
		return c.post("/dashboard/test/webhooks/deliveries/"+delivery+"/redeliver", nil)
	}
	// lastEvent is the last event of stream, its data decoded into data.
	lastEvent := func(stream string, data any) (string, domain.Meta) {
		t.Helper()
		events, err := h.store.ReadStream(context.Background(), stream, 0, 1000)
		if err != nil || len(events) == 0 {
			t.Fatalf("stream %s: %d events, %v", stream, len(events), err)
		}
		last := events[len(events)-1]
		var meta domain.Meta
		if err := json.Unmarshal(last.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(last.Data, data); err != nil {
			t.Fatal(err)
		}
		return last.Type, meta
	}

	// An escrow's delivery: on the escrow's stream and its timeline.
	r := expectStatus(t, redeliver(escrowHit.ID), 303, "redeliver the escrow's webhook")
	if r.Location != "/dashboard/test/webhooks?done=redelivered" {
		t.Fatalf("redeliver sends to %q", r.Location)
	}
	var asked webhook.RedeliveryRequested
	typ, meta := lastEvent(app.EscrowKind.StreamName(id), &asked)
	if typ != "webhook.redelivery_requested" || meta.Actor != user || meta.MerchantID != h.m.MerchantID ||
		meta.Environment != domain.Test || asked.DeliveryID != escrowHit.ID || asked.Event != "escrow.disputed" || asked.EscrowID != id {
		t.Fatalf("the escrow's last event %s %+v, metadata %+v (user %s, delivery %s)", typ, asked, meta, user, escrowHit.ID)
	}
	body := c.page("/dashboard/test/escrows/" + id)
	entry := regexp.MustCompile(`<li>[^\n]*webhook\.redelivery_requested[^\n]*</li>`).FindString(body)
	if !strings.Contains(entry, "escrow.disputed, delivery "+escrowHit.ID) || !strings.Contains(entry, "by support@shop.example (dashboard)") {
		t.Fatalf("the timeline's redelivery entry %q in %s", entry, body)
	}

	// A payment's delivery: in the delivery's own stream.
	expectStatus(t, redeliver(paymentHit.ID), 303, "redeliver the payment's webhook")
	asked = webhook.RedeliveryRequested{}
	typ, meta = lastEvent(app.WebhookDeliveryKind.StreamName(paymentHit.ID), &asked)
	if typ != "webhook.redelivery_requested" || meta.Actor != user || asked.DeliveryID != paymentHit.ID ||
		asked.Event != "payment.deposit.success" || asked.EscrowID != "" {
		t.Fatalf("the delivery's event %s %+v, metadata %+v", typ, asked, meta)
	}

	// The API's retry: the same command, the key as the actor.
	h.do(req{method: "POST", path: "/v1/merchant/webhook/deliveries/" + escrowHit.ID + "/retry", key: h.sa()}).
		expect(t, 200, "Webhook delivery queued for retry")
	asked = webhook.RedeliveryRequested{}
	if typ, meta = lastEvent(app.EscrowKind.StreamName(id), &asked); typ != "webhook.redelivery_requested" ||
		!strings.HasPrefix(meta.Actor, "key_") || asked.DeliveryID != escrowHit.ID {
		t.Fatalf("the API's retry recorded %s %+v, metadata %+v", typ, asked, meta)
	}

	// A delivery the merchant does not have is refused, and nothing is
	// recorded of it.
	unknown := "00000000-0000-7000-8000-000000000001"
	expectStatus(t, redeliver(unknown), 404, "redeliver an unknown delivery")
	if events, err := h.store.ReadStream(context.Background(), app.WebhookDeliveryKind.StreamName(unknown), 0, 10); err != nil || len(events) != 0 {
		t.Fatalf("a refused redelivery recorded %d events (%v)", len(events), err)
	}
	// Every redelivery asked reached the receiver again.
	for _, d := range []string{escrowHit.ID, paymentHit.ID} {
		want := 2
		if d == escrowHit.ID {
			want = 3
		}
		deadline := time.Now().Add(15 * time.Second)
		for got := 0; ; time.Sleep(10 * time.Millisecond) {
			got = 0
			for _, hit := range rc.delivered() {
				if hit.ID == d {
					got++
				}
			}
			if got >= want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("delivery %s arrived %d times, want %d", d, got, want)
			}
		}
	}
	// Each request was queued once: from the delivery's stream, not again
	// from the escrow's copy of it.
	h.webhooksCaughtUp()
	for d, asked := range map[string]int{escrowHit.ID: 2, paymentHit.ID: 1} {
		var n int
		if err := h.pool.QueryRow(context.Background(), `SELECT manual_retries FROM webhook_deliveries WHERE id = $1`, d).Scan(&n); err != nil || n != asked {
			t.Errorf("delivery %s counts %d redeliveries (%v), want %d", d, n, err, asked)
		}
	}
}

// TestDashboardUserChangesAreEventsOfTheOwner: an owner adding and
// removing a user on the Users page is recorded in the merchant's stream
// with the owner as the actor (the user's id and role, not their email);
// removing a user that is not there records nothing.
func TestDashboardUserChangesAreEventsOfTheOwner(t *testing.T) {
	h := newHarness(t)
	owner := h.dashUser("owner@shop.example", dashauth.Owner)
	users, err := h.api.users.Users(context.Background(), h.m.MerchantID)
	if err != nil || len(users) != 1 {
		t.Fatalf("users %v %v", users, err)
	}
	ownerID := users[0].ID
	stream := app.MerchantKind.StreamName(h.m.MerchantID)
	last := func() (string, domain.Meta, map[string]any) {
		t.Helper()
		events, err := h.store.ReadStream(context.Background(), stream, 0, 1000)
		if err != nil || len(events) == 0 {
			t.Fatalf("the merchant's stream: %d events, %v", len(events), err)
		}
		ev := events[len(events)-1]
		var meta domain.Meta
		var data map[string]any
		if err := json.Unmarshal(ev.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(ev.Data), "@shop.example") {
			t.Errorf("%s holds an email: %s", ev.Type, ev.Data)
		}
		return ev.Type, meta, data
	}
	owner.page("/dashboard/users")
	expectStatus(t, owner.post("/dashboard/users", url.Values{"email": {"ada@shop.example"}, "role": {"support"}}), 201, "add a user")
	users, _ = h.api.users.Users(context.Background(), h.m.MerchantID)
	if len(users) != 2 {
		t.Fatalf("users %+v", users)
	}
	added := users[1].ID
	if typ, meta, data := last(); typ != "merchant.dashboard_user_added" || meta.Actor != ownerID || data["userId"] != added || data["role"] != "support" {
		t.Fatalf("after adding: %s %+v %v (owner %s, user %s)", typ, meta, data, ownerID, added)
	}

	owner.page("/dashboard/users")
	expectStatus(t, owner.post("/dashboard/users/"+added+"/delete", nil), 303, "remove the user")
	typ, meta, data := last()
	if typ != "merchant.dashboard_user_removed" || meta.Actor != ownerID || data["userId"] != added {
		t.Fatalf("after removing: %s %+v %v", typ, meta, data)
	}
	before, err := h.store.ReadStream(context.Background(), stream, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	owner.page("/dashboard/users")
	expectStatus(t, owner.post("/dashboard/users/"+added+"/delete", nil), 303, "remove the user again")
	if after, err := h.store.ReadStream(context.Background(), stream, 0, 1000); err != nil || len(after) != len(before) {
		t.Fatalf("removing a user that is not there recorded %d events (%v)", len(after)-len(before), err)
	}
}
