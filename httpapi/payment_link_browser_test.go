package httpapi

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestPaymentLinkBrowser: a buyer opens the payment link in a real
// browser on a 360 px phone and on a desktop, types their details, is sent
// to the session's page and pays there by a deposit made for it. The
// link page fits the phone, labels every field, and keeps the checkout
// page's keyboard order.
func TestPaymentLinkBrowser(t *testing.T) {
	f := newCheckoutFixture(t, 0)
	tab := browser(t)
	for i, vp := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"phone", 360, 740, true}, {"desktop", 1280, 900, false}} {
		t.Run(vp.name, func(t *testing.T) {
			opts := []chromedp.EmulateViewportOption{}
			if vp.mobile {
				opts = append(opts, chromedp.EmulateMobile)
			}
			if err := chromedp.Do(tab, chromedp.EmulateViewport(vp.width, vp.height, opts...)); err != nil {
				t.Fatal(err)
			}
			if i > 0 { // the first buyer paid: a second escrow for the second
				e := f.h.createEscrow(f.seller, map[string]string{"amount": "10000", "purpose": "Blue bicycle", "whoPays": "buyer",
					"description": "A used bicycle, 21 gears", "maxDelivery": "3", "deliveryTimeline": "days"}, 1).
					expect(t, 201, "Escrow created successfully").obj()
				f.escrowID, f.token = e["id"].(string), e["paymentToken"].(string)
				f.h.do(req{method: "PUT", path: "/v1/escrow/additional-fee/" + f.token, key: f.h.sa(),
					body: map[string]any{"additionalFee": 500}}).expect(t, 200, "Additional fee updated successfully")
			}
			if st := navigate(t, tab, f.h.srv.URL+"/escrow/"+f.token); st != 200 {
				t.Fatalf("link page status %d", st)
			}
			expectTexts(t, tab, map[string]string{"#purpose": "Blue bicycle", "#seller": "Ada Obi", "#total": "₦10,750.00"})
			width, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
			if err != nil || width > int(vp.width) {
				t.Fatalf("page is %d px wide on a %d px screen (%v)", width, vp.width, err)
			}
			unlabelled, err := chromedp.Run(tab, chromedp.Evaluate[int](
				`[...document.querySelectorAll("input:not([type=hidden])")].filter(i => !document.querySelector("label[for='" + i.id + "']")).length`))
			if err != nil || unlabelled != 0 {
				t.Fatalf("%d fields without a label (%v)", unlabelled, err)
			}
			order, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll("a[href], input:not([type=hidden]), button")].map(e => e.id || e.className)`))
			if err != nil || strings.Join(order, ",") != "skip,firstname,lastname,email,phone,continue" {
				t.Fatalf("focus order %v (%v)", order, err)
			}
			email := []string{"ola.phone@x.com", "ola.desk@x.com"}[i]
			phone := []string{"08035559101", "08035559102"}[i]
			for sel, v := range map[string]string{"#firstname": "Ọ̀lá", "#lastname": "Adébáyọ̀", "#email": email, "#phone": phone} {
				if err := chromedp.Do(tab, chromedp.SendKeys(sel, v)); err != nil {
					t.Fatalf("type %s: %v", sel, err)
				}
			}
			screenshot(t, tab, "link-"+vp.name)
			if st := submit(t, tab, "#continue"); st != 200 {
				t.Fatalf("continue answered %d", st)
			}
			expectTexts(t, tab, map[string]string{"#total": "₦10,750.00", "#topup-amount": "₦10,750.00"})
			if n, _ := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#pay, #wallet, #buyer").length`)); n != 0 {
				t.Error("the session a link opened shows a wallet payment or the customer")
			}
			screenshot(t, tab, "session-"+vp.name)
			if st := submit(t, tab, "#verify-pay"); st != 200 {
				t.Fatalf("verify and pay answered %d", st)
			}
			expectTexts(t, tab, map[string]string{"#status-h": "Payment successful", "#paid": "₦10,750.00"})
			screenshot(t, tab, "paid-"+vp.name)
			if st := f.escrowStatus(t); st != "ONGOING" {
				t.Fatalf("escrow %s", st)
			}
		})
	}
	f.h.assertZeroSum()
}
