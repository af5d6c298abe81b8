package httpapi

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The hosted checkout's card, bank and USSD buttons in a real browser,
// with the test environment on Paystack (the simulator, on loopback): the
// buyer picks one, follows the link to the simulator's payment page, pays
// there, is sent back to /checkout/return and sees the escrow funded.
// Each payment's page is shot at 1280 px and at 360 px.
func TestCheckoutBrowserPaysAtTheProvider(t *testing.T) {
	tab := browser(t)
	for _, gw := range []struct{ name, channel, label string }{
		{"card", "card", "Card"}, {"bank", "bank", "Bank account"}, {"ussd", "ussd", "USSD"},
	} {
		t.Run(gw.name, func(t *testing.T) {
			h := startHarnessWith(t, harnessOptions{waitTimeout: 30 * time.Second}, nil)
			sim, _ := collectThroughSim(h)
			f := newCheckoutFixtureOn(t, h, 0)
			f.open(t, map[string]any{"successUrl": "https://shop.example/done"})
			for _, width := range []int64{1280, 360} {
				if err := chromedp.Do(tab, chromedp.EmulateViewport(width, 900)); err != nil {
					t.Fatal(err)
				}
				if st := navigate(t, tab, f.sessionURL); st != 200 {
					t.Fatalf("page status %d", st)
				}
				expectTexts(t, tab, openFigures)
				expectTexts(t, tab, map[string]string{"#pay-" + gw.name: gw.label})
				if w, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); err != nil || w > int(width) {
					t.Fatalf("page is %d px wide on a %d px screen (%v)", w, width, err)
				}
				// The three buttons are told apart: none touches the next.
				gaps, err := chromedp.Run(tab, chromedp.Evaluate[[]float64](`(() => { const b = [...document.querySelectorAll("#provider-pay button")].map(e => e.getBoundingClientRect()); return b.slice(1).map((r, i) => r.top - b[i].bottom) })()`))
				if err != nil || len(gaps) != 2 || gaps[0] < 4 || gaps[1] < 4 {
					t.Fatalf("gaps between the card, bank and USSD buttons %v (%v)", gaps, err)
				}
				screenshot(t, tab, "open-"+strconv.FormatInt(width, 10))
			}
			if st := submit(t, tab, "#pay-"+gw.name); st != 200 {
				t.Fatalf("%s answered %d", gw.name, st)
			}
			expectTexts(t, tab, map[string]string{"#status-h": "Continue to the payment page"})
			screenshot(t, tab, "continue-360")
			if st := submit(t, tab, "#continue"); st != 200 {
				t.Fatalf("the simulator's page answered %d", st)
			}
			loc, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.origin + location.pathname`))
			if err != nil || !strings.HasPrefix(loc, sim.URL+"/_sim/checkout/") {
				t.Fatalf("the buyer is at %q, not the simulator's page %s (%v)", loc, sim.URL, err)
			}
			screenshot(t, tab, "provider-360")
			if st := submit(t, tab, `button[name="pay"][value="`+gw.channel+`"]`); st != 200 {
				t.Fatalf("the return page answered %d", st)
			}
			path, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.origin + location.pathname`))
			if err != nil || path != f.h.srv.URL+"/checkout/return" {
				t.Fatalf("the buyer came back to %q (%v)", path, err)
			}
			for _, width := range []int64{360, 1280} {
				if err := chromedp.Do(tab, chromedp.EmulateViewport(width, 900)); err != nil {
					t.Fatal(err)
				}
				expectTexts(t, tab, map[string]string{"#status-h": "Payment successful", "#payment-status": "success"})
				screenshot(t, tab, "paid-"+strconv.FormatInt(width, 10))
			}
			href, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#return").href`))
			if err != nil || !strings.HasPrefix(href, "https://shop.example/done?") {
				t.Errorf("return link %q (%v)", href, err)
			}
			var channel string
			for _, tx := range sim.Transactions() {
				channel = tx.Channel
			}
			if channel != gw.channel {
				t.Fatalf("the simulator recorded channel %q, want %q", channel, gw.channel)
			}
			h.settleEvents(sim) // the charge.success event, after the return page's verify
			if st := f.escrowStatus(t); st != "ONGOING" {
				t.Fatalf("escrow %s after paying by %s", st, gw.name)
			}
			h.expectWallet(f.buyer, 0, 10250) // the additional fee is the merchant's
			h.auditClean()
		})
	}
}
