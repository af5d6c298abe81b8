package httpapi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The hosted checkout in a real browser: Debian's headless Chromium,
// driven over the DevTools protocol by chromedp. scripts/chromium.sh (run
// by make test) installs Chromium when it is missing; without it these
// tests skip. Screenshots are kept under .data/screenshots (gitignored),
// or ESCROW_SCREENSHOT_DIR.

// chromiumPath finds the browser, or skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("ESCROW_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	t.Skip("chromium not found: run scripts/chromium.sh (make test does) or set ESCROW_CHROMIUM")
	return ""
}

// browser starts a fresh headless Chromium for the test and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc(); cancel() })
	if err := chromedp.Do(tab); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return tab
}

// screenshot saves the tab's whole page as name.png, logs the path and
// returns the image.
func screenshot(t *testing.T, tab context.Context, name string) []byte {
	t.Helper()
	dir := os.Getenv("ESCROW_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join("..", ".data", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path, _ := filepath.Abs(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".png"))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return png
}

func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func expectTexts(t *testing.T, tab context.Context, want map[string]string) {
	t.Helper()
	for sel, w := range want {
		if got := text(t, tab, sel); got != w {
			t.Errorf("%s shows %q, want %q", sel, got, w)
		}
	}
}

// navigate opens url and returns the document's HTTP status.
func navigate(t *testing.T, tab context.Context, url string) int64 {
	t.Helper()
	res, err := chromedp.Run(tab, chromedp.NavigateResponse(url))
	if err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	return res.Status
}

// submit clicks a form's button and returns the status of the page the
// form's POST answers with.
func submit(t *testing.T, tab context.Context, sel string) int64 {
	t.Helper()
	res, err := chromedp.RunResponse(tab, chromedp.Click(sel))
	if err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	return res.Status
}

var openFigures = map[string]string{
	"#merchant": "Shop", "#purpose": "Blue bicycle", "#description": "A used bicycle, 21 gears", "#seller": "Ada Obi",
	"#amount": "₦10,000.00", "#buyer-fee": "₦250.00", "#additional-fee": "₦500.00", "#total": "₦10,750.00",
}

func TestCheckoutBrowserPaysFromWallet(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	tab := browser(t)
	f.open(t, map[string]any{"successUrl": "https://shop.example/done"})
	if st := navigate(t, tab, f.sessionURL); st != 200 {
		t.Fatalf("page status %d", st)
	}
	expectTexts(t, tab, openFigures)
	if d := text(t, tab, "#delivery"); !strings.Contains(d, "within 3 days of your payment") {
		t.Errorf("delivery window %q", d)
	}
	if w := text(t, tab, "#wallet"); w != "₦20,000.00" {
		t.Errorf("wallet %q", w)
	}
	// The escrow's photo loads under the page's CSP.
	loaded, err := chromedp.Run(tab, chromedp.Evaluate[bool](`[...document.images].every(i => i.complete && i.naturalWidth > 0)`))
	if err != nil || !loaded {
		t.Errorf("images loaded: %v %v", loaded, err)
	}
	screenshot(t, tab, "open")
	if st := submit(t, tab, "#pay"); st != 200 {
		t.Fatalf("pay answered %d", st)
	}
	expectTexts(t, tab, map[string]string{"#status-h": "Payment successful", "#reference": "checkout_" + f.sessionID,
		"#paid": "₦10,750.00"})
	href, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#return").href`))
	if err != nil || href != "https://shop.example/done?paymentToken="+f.token+"&reference=checkout_"+f.sessionID {
		t.Errorf("return link %q (%v)", href, err)
	}
	screenshot(t, tab, "paid")
	if st := f.escrowStatus(t); st != "ONGOING" {
		t.Fatalf("escrow %s after paying on the page", st)
	}
	f.h.expectWallet(f.buyer, 20000-10750, 10250)
	f.h.expectMerchant(0, 500)
	f.h.assertZeroSum()
}

func TestCheckoutBrowserTopUpInTest(t *testing.T) {
	f := newCheckoutFixture(t, 5000) // 5,750 short of 10,750
	tab := browser(t)
	f.open(t, nil)
	if st := navigate(t, tab, f.sessionURL); st != 200 {
		t.Fatalf("page status %d", st)
	}
	expectTexts(t, tab, openFigures)
	expectTexts(t, tab, map[string]string{"#topup-amount": "₦5,750.00"})
	if acct := text(t, tab, "#topup-account"); len(acct) != 10 {
		t.Errorf("test account number %q", acct)
	}
	if n, _ := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#pay").length`)); n != 0 {
		t.Error("a pay button is shown for a wallet that does not cover the total")
	}
	screenshot(t, tab, "topup")
	if st := submit(t, tab, "#verify-pay"); st != 200 {
		t.Fatalf("verify and pay answered %d", st)
	}
	expectTexts(t, tab, map[string]string{"#status-h": "Payment successful", "#paid": "₦10,750.00"})
	screenshot(t, tab, "paid")
	if st := f.escrowStatus(t); st != "ONGOING" {
		t.Fatalf("escrow %s", st)
	}
	// 5,000 + 5,750 deposited - 10,750 paid.
	f.h.expectWallet(f.buyer, 0, 10250)
	f.h.assertZeroSum()
}

func TestCheckoutBrowserExpiredSession(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	tab := browser(t)
	f.open(t, map[string]any{"expiresInMinutes": 5, "cancelUrl": "https://shop.example/cart"})
	if st := navigate(t, tab, f.sessionURL); st != 200 {
		t.Fatalf("page status %d", st)
	}
	f.clock.Store(int64(6 * time.Minute)) // the buyer waited too long before clicking
	if st := submit(t, tab, "#pay"); st != 410 {
		t.Fatalf("pay of an expired session answered %d", st)
	}
	expectTexts(t, tab, map[string]string{"#status-h": "This checkout has expired"})
	screenshot(t, tab, "expired")
	if st := navigate(t, tab, f.sessionURL); st != 410 {
		t.Fatalf("expired page status %d", st)
	}
	if st := navigate(t, tab, f.h.srv.URL+"/checkout/cs_AAAAAAAAAAAAAAAAAAAAAAAAAA"); st != 404 {
		t.Fatalf("unknown session status %d", st)
	}
	expectTexts(t, tab, map[string]string{"#status-h": "Checkout not found"})
	screenshot(t, tab, "unknown")
	f.h.expectWallet(f.buyer, 20000, 0)
	if st := f.escrowStatus(t); st != "PENDING" {
		t.Fatalf("escrow %s", st)
	}
}

// A double click, and the same session paid from two tabs at once, pay
// once.
func TestCheckoutBrowserDoubleSubmit(t *testing.T) {
	f := newCheckoutFixture(t, 30000)
	tab := browser(t)
	tab2, cancel := chromedp.NewContext(tab) // a second tab of the same browser
	defer cancel()
	f.open(t, nil)
	for _, tb := range []context.Context{tab, tab2} {
		if st := navigate(t, tb, f.sessionURL); st != 200 {
			t.Fatalf("page status %d", st)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, errs[0] = chromedp.RunResponse(tab, chromedp.DoubleClick("#pay"))
	}()
	go func() {
		defer wg.Done()
		_, errs[1] = chromedp.RunResponse(tab2, chromedp.Click("#pay"))
	}()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("tab %d: %v", i, err)
		}
	}
	for i, tb := range []context.Context{tab, tab2} {
		if ref := text(t, tb, "#reference"); ref != "checkout_"+f.sessionID {
			t.Fatalf("tab %d shows reference %q", i, ref)
		}
	}
	screenshot(t, tab2, "second-tab")
	f.h.expectWallet(f.buyer, 30000-10750, 10250)
	f.h.assertZeroSum()
}

// On a 360 px wide phone the page fits without sideways scrolling, and
// the pay button is reachable and large enough to tap.
func TestCheckoutBrowserPhoneViewport(t *testing.T) {
	f := newCheckoutFixture(t, 20000)
	tab := browser(t)
	f.open(t, nil)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(360, 740, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if st := navigate(t, tab, f.sessionURL); st != 200 {
		t.Fatalf("page status %d", st)
	}
	expectTexts(t, tab, openFigures)
	width, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	if err != nil || width > 360 {
		t.Fatalf("page is %d px wide on a 360 px screen (%v)", width, err)
	}
	box, err := chromedp.Run(tab, chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector("#pay").getBoundingClientRect(); return [r.left, r.right, r.height] })()`))
	if err != nil || box[0] < 0 || box[1] > 360 || box[2] < 44 {
		t.Fatalf("pay button box %v (%v): must lie within the screen and be at least 44 px tall", box, err)
	}
	// Keyboard order: the skip link first, then the pay button before cancel.
	order, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll("a[href], button")].map(e => e.id || e.className)`))
	if err != nil || len(order) < 3 || order[0] != "skip" || order[1] != "pay" || order[2] != "cancel" {
		t.Fatalf("focus order %v (%v)", order, err)
	}
	screenshot(t, tab, "phone")
	if st := submit(t, tab, "#pay"); st != 200 {
		t.Fatalf("pay answered %d", st)
	}
	screenshot(t, tab, "phone-paid")
	f.h.expectWallet(f.buyer, 20000-10750, 10250)
}
