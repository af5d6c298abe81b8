package httpapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/escrowd/escrowd/internal/dashauth"
)

// The dashboard in a real browser (headless Chromium, as the checkout's
// tests): a support person's day and an owner's key roll, each step
// photographed at 360 px and 1280 px (.data/screenshots, gitignored, or
// ESCROW_SCREENSHOT_DIR).

// dashShots checks the page at a phone's and a desktop's width (no
// sideways scrolling at 360 px, every field labelled) and saves a
// screenshot at each.
func dashShots(t *testing.T, tab context.Context, name string) {
	t.Helper()
	for _, w := range []int64{360, 1280} {
		opts := []chromedp.EmulateViewportOption{}
		if w == 360 {
			opts = append(opts, chromedp.EmulateMobile)
		}
		if err := chromedp.Do(tab, chromedp.EmulateViewport(w, 800, opts...)); err != nil {
			t.Fatal(err)
		}
		width, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil || int64(width) > w {
			t.Errorf("%s: the page is %d px wide at %d px (%v)", name, width, w, err)
		}
		unlabelled, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("input:not([type=hidden]), select, textarea")].filter(e => !e.labels || e.labels.length === 0).map(e => e.id || e.name)`))
		if err != nil || len(unlabelled) > 0 {
			t.Errorf("%s: fields without a label: %v (%v)", name, unlabelled, err)
		}
		screenshot(t, tab, name+"-"+map[int64]string{360: "360", 1280: "1280"}[w])
	}
}

func typeInto(t *testing.T, tab context.Context, sel, text string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.SendKeys(sel, text)); err != nil {
		t.Fatalf("type into %s: %v", sel, err)
	}
}

func TestDashboardBrowserSupportAndOwner(t *testing.T) {
	h := newWebhookHarness(t)
	rc, seller, _, id := h.hookedDispute()
	rc.waitFor(t, h, 1)
	owner := h.dashUser("owner@shop.example", dashauth.Owner)

	tab := browser(t)
	// Log in with the password (Enter in the field, from the keyboard),
	// then the authenticator's code.
	if st := navigate(t, tab, h.srv.URL+"/dashboard"); st != 200 {
		t.Fatalf("login page %d", st)
	}
	dashShots(t, tab, "login")
	typeInto(t, tab, "#email", owner.email)
	typeInto(t, tab, "#password", dashPassword)
	if _, err := chromedp.RunResponse(tab, chromedp.SendKeys("#password", "\r")); err != nil {
		t.Fatal(err)
	}
	if h := text(t, tab, "h1"); h != "Authenticator code" {
		t.Fatalf("after the password: %q", h)
	}
	dashShots(t, tab, "code")
	code, _ := dashauth.TOTPCode(owner.secret, time.Now().Add(30*time.Second)) // the setup used this step's
	typeInto(t, tab, "#code", code)
	if st := submit(t, tab, "#verify"); st != 200 {
		t.Fatalf("after the code: %d", st)
	}
	expectTexts(t, tab, map[string]string{"h1": "Overview", "#env": "TEST data: no real money", "#role": "owner",
		"#balance-main": "₦0.00", "#dispute-count": "1"})
	dashShots(t, tab, "overview")

	// Resolve the dispute by SPLIT and see the balances.
	navigate(t, tab, h.srv.URL+"/dashboard/test/escrows/"+id)
	dashShots(t, tab, "dispute")
	if err := chromedp.Do(tab, chromedp.Click("#out-split")); err != nil {
		t.Fatal(err)
	}
	typeInto(t, tab, "#sellerAmount", "6000")
	typeInto(t, tab, "#buyerAmount", "4000")
	typeInto(t, tab, "#resolution", "Half the screen was cracked")
	if st := submit(t, tab, "#resolve"); st != 200 {
		t.Fatalf("resolve: %d", st)
	}
	expectTexts(t, tab, map[string]string{"#notice": "The dispute is resolved.", "#escrow-status": "SPLIT",
		"#balance-Buyer .main": "₦13,750.00", "#balance-Seller .main": "₦6,000.00"})
	if tl := text(t, tab, "#timeline"); !strings.Contains(tl, "owner@shop.example (dashboard)") {
		t.Errorf("the timeline does not name the user: %s", tl)
	}
	dashShots(t, tab, "dispute-split")
	navigate(t, tab, h.srv.URL+"/dashboard/test")
	expectTexts(t, tab, map[string]string{"#balance-main": "₦125.00", "#balance-escrow": "₦0.00", "#dispute-count": "0"})

	// Block a customer.
	navigate(t, tab, h.srv.URL+"/dashboard/test/customers")
	typeInto(t, tab, "#reason-"+seller, "Chargebacks")
	if st := submit(t, tab, "#customer-"+seller+" button.block"); st != 200 {
		t.Fatalf("block: %d", st)
	}
	expectTexts(t, tab, map[string]string{"#notice": "The customer is blocked.", "#customer-" + seller + " .cstatus": "blocked\nChargebacks"})
	dashShots(t, tab, "customer-blocked")
	if st := h.customerStatus(seller); st != "blocked" {
		t.Fatalf("the seller is %s", st)
	}

	// Redeliver the escrow's escrow.disputed webhook: the receiver gets the
	// message again, and the escrow's timeline says who asked.
	first := ""
	for deadline := time.Now().Add(15 * time.Second); first == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, hit := range rc.delivered() {
			if hit.Event == "escrow.disputed" {
				first = hit.ID
			}
		}
	}
	if first == "" {
		t.Fatalf("no escrow.disputed webhook among %+v", rc.delivered())
	}
	navigate(t, tab, h.srv.URL+"/dashboard/test/webhooks")
	if st := submit(t, tab, "#delivery-"+first+" button.redeliver"); st != 200 {
		t.Fatalf("redeliver: %d", st)
	}
	expectTexts(t, tab, map[string]string{"#notice": "The delivery is queued to be sent again."})
	dashShots(t, tab, "webhook-redelivered")
	again := 0
	deadline := time.Now().Add(15 * time.Second)
	for again == 0 && time.Now().Before(deadline) {
		for _, hit := range rc.delivered() {
			if hit.ID == first && hit.Attempt != "1" {
				again++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if again == 0 {
		t.Fatalf("the redelivery of %s did not arrive: %+v", first, rc.delivered())
	}
	navigate(t, tab, h.srv.URL+"/dashboard/test/escrows/"+id)
	entry, err := chromedp.Run(tab, chromedp.Evaluate[string](
		`[...document.querySelectorAll("#timeline li")].map(e => e.textContent).find(s => s.includes("webhook.redelivery_requested")) || ""`))
	if err != nil || !strings.Contains(entry, "escrow.disputed, delivery "+first) || !strings.Contains(entry, "by owner@shop.example (dashboard)") {
		t.Errorf("the timeline's redelivery entry %q (%v)", entry, err)
	}

	// Create a key (shown once), use it, revoke it.
	navigate(t, tab, h.srv.URL+"/dashboard/test/keys")
	if err := chromedp.Do(tab, chromedp.SetValue("#key-role", "standard")); err != nil {
		t.Fatal(err)
	}
	if st := submit(t, tab, "#create-key"); st != 201 {
		t.Fatalf("create key: %d", st)
	}
	key, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#new-key").value`))
	if err != nil || !strings.HasPrefix(key, "sk_test_") {
		t.Fatalf("new key %q %v", key, err)
	}
	dashShots(t, tab, "key-created")
	h.do(req{path: "/v1/customers", key: key}).expect(t, 200, "")
	keyID := ""
	for kid, k := range h.merchantState().Keys {
		if k.Digest == KeyDigest(key) {
			keyID = kid
		}
	}
	navigate(t, tab, h.srv.URL+"/dashboard/test/keys")
	if st := submit(t, tab, "#key-"+keyID+" button.revoke"); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	expectTexts(t, tab, map[string]string{"#notice": "The key is revoked: requests with it are refused from now on.",
		"#key-" + keyID + " .kstate": "revoked"})
	dashShots(t, tab, "key-revoked")
	h.do(req{path: "/v1/customers", key: key}).expect(t, 403, "Unauthorized Access")

	// The live pages are marked apart.
	navigate(t, tab, h.srv.URL+"/dashboard/live")
	expectTexts(t, tab, map[string]string{"#env": "LIVE data: real money"})
	dashShots(t, tab, "live")
}
