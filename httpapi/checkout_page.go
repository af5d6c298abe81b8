package httpapi

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/app"
)

// The buyer's page: server-rendered, no JavaScript, every action a POST
// form carrying the session's anti-forgery token. Nothing here is cached
// (the page is one buyer's), framed, or sends the session's secret URL on
// as a Referer.

//go:embed checkout_templates/*.html checkout_templates/checkout.css
var checkoutFS embed.FS

var checkoutTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"naira": naira,
	"kobo":  func(a money.Amount) string { return strconv.FormatInt(a.Kobo(), 10) },
	"when":  func(t time.Time) string { return t.UTC().Format("2 Jan 2006, 15:04 UTC") },
	"inc":   func(i int) int { return i + 1 },
}).ParseFS(checkoutFS, "checkout_templates/*.html"))

var checkoutCSS = func() []byte {
	b, err := checkoutFS.ReadFile("checkout_templates/checkout.css")
	if err != nil {
		panic(err)
	}
	return b
}()

func (s *Server) checkoutPageRoutes() {
	limit := bodyLimit(64 << 10) // a page form is a few short fields
	g := s.e.Group("/checkout", s.checkoutHeaders)
	g.GET("/assets/checkout.css", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "text/css; charset=utf-8", checkoutCSS)
	})
	g.GET("/return", s.checkoutReturn)
	g.GET("/:id", s.checkoutPage)
	g.POST("/:id/provider", s.checkoutProvider, limit)
	g.POST("/:id/pay", s.checkoutPay, limit)
	g.POST("/:id/topup", s.checkoutTopUpAndPay, limit)
	g.POST("/:id/cancel", s.checkoutCancel, limit)
}

// checkoutHeaders sets the page's security headers on every answer,
// errors included: a strict CSP (own styles, own images and the https
// images a merchant linked, no script at all, forms post only here), no
// caching, no framing, no Referer.
func (s *Server) checkoutHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	img := "'self'"
	if u, err := url.Parse(s.cfg.PublicURL); err == nil && u.Scheme != "" && u.Host != "" {
		img += " " + u.Scheme + "://" + u.Host // uploaded images are served under the public URL
	}
	img += " https:" // images linked by URL (image_links.go)
	csp := "default-src 'none'; style-src 'self'; img-src " + img +
		"; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		return next(c)
	}
}

// naira formats an amount for people: ₦10,250.00.
func naira(a money.Amount) string {
	k := a.Kobo()
	sign := ""
	if k < 0 {
		sign, k = "-", -k
	}
	whole := strconv.FormatInt(k/100, 10)
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return fmt.Sprintf("%s₦%s.%02d", sign, b.String(), k%100)
}

// deliveryInWords is the delivery window as a sentence's end: "3 days".
func deliveryInWords(t escrow.Terms) string {
	unit := strings.TrimSuffix(t.DeliveryTimeline, "s")
	if unit == "" {
		unit = "day"
	}
	if t.MaxDelivery == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(t.MaxDelivery) + " " + unit + "s"
}

// pageData is what the templates render.
type pageData struct {
	Title       string
	ID          string
	Token       string
	View        app.CheckoutView
	Delivery    string
	Total       money.Amount
	CanPay      bool
	Deposit     *payment.TestAccount
	DepositRef  string
	Live        bool
	Error       string
	Receipt     *ledger.Record
	AlreadyPaid bool   // the receipt of an earlier visit's payment
	ReturnURL   string // successUrl with the reference and payment token
	CancelURL   string
	Status      checkout.Status
	ExpiresAt   time.Time
	Form        linkForm // the payment link's fields as typed
	// Gateways are the ways to pay at the provider the page offers (card,
	// bank, ussd); ProviderURL the provider's page of the one chosen.
	Gateways    []string
	ProviderURL string
	// Outcome and Paid are what the return from the provider's page found.
	Outcome string
	Paid    money.Amount
}

func (s *Server) renderPage(c echo.Context, status int, name string, d pageData) error {
	var buf bytes.Buffer
	if err := checkoutTemplates.ExecuteTemplate(&buf, name, d); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// successURL is the session's successUrl with the payment's reference and
// the funded escrow's payment token ("" without a successUrl).
func successURL(st checkout.State, reference, token string) string {
	if st.SuccessURL == "" {
		return ""
	}
	u, err := url.Parse(st.SuccessURL)
	if err != nil {
		return ""
	}
	q := u.Query()
	q.Set("reference", reference)
	q.Set("paymentToken", token)
	u.RawQuery = q.Encode()
	return u.String()
}

// checkoutError renders the page for an error: the session's own ends
// (unknown 404, expired/paid/cancelled 410) get their clear pages,
// anything else the checkout page again with the message.
func (s *Server) checkoutError(c echo.Context, err error) error {
	var de *domain.Error
	if !errors.As(err, &de) {
		s.log.Error("checkout page failed", errField(err), reqField(c))
		return s.renderPage(c, http.StatusInternalServerError, "problem.html", pageData{Title: "Something went wrong",
			Error: "Something went wrong on our side. Nothing was paid. Please try again in a moment."})
	}
	switch {
	case errors.Is(err, checkout.ErrNotFound):
		return s.renderPage(c, http.StatusNotFound, "notfound.html", pageData{Title: "Checkout not found"})
	case errors.Is(err, checkout.ErrExpired), errors.Is(err, checkout.ErrCancelled), errors.Is(err, checkout.ErrUsed):
		return s.checkoutPageFor(c, c.Param("id"), nil)
	}
	return s.checkoutPageFor(c, c.Param("id"), de)
}

func (s *Server) checkoutPage(c echo.Context) error {
	return s.checkoutPageFor(c, c.Param("id"), nil)
}

// checkoutPageFor renders session id as it is now, with problem (when not
// nil) shown on an open session's page under problem's status. It never
// calls checkoutError, which calls it.
func (s *Server) checkoutPageFor(c echo.Context, id string, problem *domain.Error) error {
	ctx := c.Request().Context()
	v, err := s.app.CheckoutPage(ctx, id)
	if errors.Is(err, checkout.ErrNotFound) {
		return s.renderPage(c, http.StatusNotFound, "notfound.html", pageData{Title: "Checkout not found"})
	}
	if err != nil {
		s.log.Error("checkout page failed", errField(err), reqField(c))
		return s.renderPage(c, http.StatusInternalServerError, "problem.html", pageData{Title: "Something went wrong",
			Error: "Something went wrong on our side. Nothing was paid. Please try again in a moment."})
	}
	status := http.StatusOK
	message := ""
	if problem != nil {
		status, message = statusOf(problem.Code), problem.Message
	}
	st := v.Session
	d := pageData{ID: st.ID, Token: st.FormToken, View: v, Delivery: deliveryInWords(v.Escrow.Terms),
		Total: v.Escrow.Due(), Status: st.StatusAt(s.app.Now()),
		ExpiresAt: st.ExpiresAt, Live: st.Environment == domain.Live, Error: message}
	switch d.Status {
	case checkout.Complete:
		d.Title, d.Receipt, d.AlreadyPaid = "Already paid", v.Payment, true
		if v.Payment != nil {
			d.ReturnURL = successURL(st, v.Payment.Reference, paidToken(v.Payment, st))
		}
		return s.renderPage(c, http.StatusGone, "receipt.html", d)
	case checkout.Cancelled:
		d.Title, d.CancelURL = "Checkout cancelled", st.CancelURL
		return s.renderPage(c, http.StatusGone, "ended.html", d)
	case checkout.Expired:
		d.Title, d.CancelURL = "Checkout expired", st.CancelURL
		return s.renderPage(c, http.StatusGone, "ended.html", d)
	}
	d.Title = "Pay " + naira(d.Total) + " to " + v.Merchant.Name
	payable := v.Escrow.Exists() && v.Escrow.Status.Phase() == escrow.AwaitingPayment
	if !payable && problem == nil {
		d.Error = "This escrow can no longer be paid. Nothing was charged; ask the merchant for a new checkout link."
	}
	d.CanPay = payable && v.Shortfall == 0 && !st.DepositOnly
	provider := s.app.CollectsThroughProvider(st.Environment)
	if payable && provider {
		d.Gateways = []string{"card", "bank", "ussd"}
	}
	if payable && !d.CanPay && !d.Live && !provider {
		res, err := s.app.CheckoutDeposit(ctx, id, v.Shortfall)
		var de *domain.Error
		switch {
		case errors.As(err, &de): // a blocked buyer, payments not configured: say so, offer nothing
			if d.Error == "" {
				d.Error = de.Message
			}
		case err != nil:
			return s.checkoutError(c, err)
		default:
			d.Deposit, d.DepositRef = res.TestAccount, res.Record.Reference
		}
	}
	return s.renderPage(c, status, "checkout.html", d)
}

// paidToken is the payment token of the escrow the payment funded (a
// clone's own token when the link sells units).
func paidToken(p *ledger.Record, st checkout.State) string {
	if p.EscrowDetails != nil && len(p.EscrowDetails.PaymentTokens) == 1 {
		return p.EscrowDetails.PaymentTokens[0]
	}
	return st.PaymentToken
}

// formSession reads the session a page form acts on and checks its
// anti-forgery token, and the total the page showed (kobo).
func (s *Server) formSession(c echo.Context) (checkout.State, money.Amount, error) {
	st, err := s.app.Checkout(c.Request().Context(), c.Param("id"))
	if err != nil {
		return st, 0, err
	}
	// The token comes from the form's body only: one in the query string
	// would be written to logs and Referer headers on its way.
	if !formTokenValid(st, c.Request().PostFormValue("token")) {
		return st, 0, errForgedForm
	}
	var total money.Amount
	if raw := c.FormValue("total"); raw != "" {
		k, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || k <= 0 {
			return st, 0, domain.Invalidf("total must be a positive number of kobo")
		}
		total = money.Amount(k)
	}
	return st, total, nil
}

// forged answers a form without the session's token: 403, nothing done.
func (s *Server) forged(c echo.Context) error {
	return s.renderPage(c, http.StatusForbidden, "problem.html", pageData{Title: "Form expired", ID: c.Param("id"),
		Error: errForgedForm.Message})
}

func (s *Server) checkoutPay(c echo.Context) error {
	_, total, err := s.formSession(c)
	if errors.Is(err, errForgedForm) {
		return s.forged(c)
	}
	if err != nil {
		return s.checkoutError(c, err)
	}
	res, err := s.app.PayCheckout(c.Request().Context(), c.Param("id"), total)
	if err != nil {
		return s.checkoutError(c, err)
	}
	return s.receipt(c, res)
}

func (s *Server) checkoutTopUpAndPay(c echo.Context) error {
	_, total, err := s.formSession(c)
	if errors.Is(err, errForgedForm) {
		return s.forged(c)
	}
	if err != nil {
		return s.checkoutError(c, err)
	}
	res, err := s.app.PayCheckoutAfterDeposit(c.Request().Context(), c.Param("id"), c.FormValue("deposit"), total)
	if err != nil {
		return s.checkoutError(c, err)
	}
	return s.receipt(c, res)
}

// receipt answers a payment (a first one or its repeat) with its receipt.
func (s *Server) receipt(c echo.Context, res app.PaymentResult) error {
	v, err := s.app.CheckoutPage(c.Request().Context(), c.Param("id"))
	if err != nil {
		return s.checkoutError(c, err)
	}
	rec := res.Record
	token := paidToken(&rec, v.Session)
	d := pageData{Title: "Payment successful", ID: v.Session.ID, View: v, Receipt: &rec, Status: checkout.Complete,
		Delivery: deliveryInWords(v.Escrow.Terms), ReturnURL: successURL(v.Session, rec.Reference, token)}
	return s.renderPage(c, http.StatusOK, "receipt.html", d)
}

func (s *Server) checkoutCancel(c echo.Context) error {
	_, _, err := s.formSession(c)
	if errors.Is(err, errForgedForm) {
		return s.forged(c)
	}
	if err != nil {
		return s.checkoutError(c, err)
	}
	if _, err := s.app.CancelCheckout(c.Request().Context(), c.Param("id")); err != nil {
		return s.checkoutError(c, err)
	}
	return s.checkoutPageFor(c, c.Param("id"), nil)
}

// checkoutProvider starts the payment at the provider by the gateway the
// buyer chose and answers a page linking to the provider's: a link, not a
// redirect, since the page's forms may only post here.
func (s *Server) checkoutProvider(c echo.Context) error {
	_, total, err := s.formSession(c)
	if errors.Is(err, errForgedForm) {
		return s.forged(c)
	}
	if err != nil {
		return s.checkoutError(c, err)
	}
	res, err := s.app.CheckoutCharge(c.Request().Context(), c.Param("id"), c.FormValue("gateway"), total, s.checkoutReturnURL())
	if err != nil {
		return s.checkoutError(c, err)
	}
	if res.AuthorizationURL == "" {
		// Paid already (this reference's payment settled): the page says how.
		return s.checkoutPageFor(c, c.Param("id"), nil)
	}
	return s.renderPage(c, http.StatusOK, "provider.html", pageData{Title: "Continue to payment", ID: c.Param("id"),
		Total: total, ProviderURL: res.AuthorizationURL})
}

// checkoutReturn is the page the provider sends the payer back to, with
// the payment's reference (Paystack adds reference and trxref): it asks
// the provider at once and says what became of the payment.
func (s *Server) checkoutReturn(c echo.Context) error {
	ref := c.QueryParam("reference")
	if ref == "" {
		ref = c.QueryParam("trxref")
	}
	if ref == "" || len(ref) > 100 {
		return s.renderPage(c, http.StatusNotFound, "notfound.html", pageData{Title: "Payment not found"})
	}
	ret, err := s.app.ReturnFromCharge(c.Request().Context(), ref)
	if errors.Is(err, app.ErrUnknownCharge) {
		return s.renderPage(c, http.StatusNotFound, "notfound.html", pageData{Title: "Payment not found"})
	}
	if err != nil {
		s.log.Error("checkout return failed", errField(err), reqField(c))
		return s.renderPage(c, http.StatusInternalServerError, "problem.html", pageData{Title: "Something went wrong",
			Error: "Something went wrong on our side. Your payment is not lost: reload this page in a moment."})
	}
	rec := ret.Payment.Record
	d := pageData{Title: "Your payment", Receipt: &rec, Paid: rec.Amount}
	switch {
	case rec.Status == ledger.Success:
		d.Outcome = "funded"
		if ret.Session != nil {
			d.ReturnURL = successURL(*ret.Session, rec.Reference, paidToken(&rec, *ret.Session))
		}
	case rec.Status == ledger.Failed && ret.Result.Charge.Status == payment.ChargeSucceeded,
		rec.Status == ledger.Failed && ret.Result.Outcome == "":
		d.Outcome, d.Paid = "credited", ret.Result.Charge.Amount
		if d.Paid == 0 {
			d.Paid = rec.Amount
		}
	case ret.Result.Charge.Status == payment.ChargeFailed:
		d.Outcome = "failed"
	default:
		d.Outcome = "pending"
	}
	if ret.Session != nil && d.Outcome != "funded" {
		d.ReturnURL = ret.Session.CancelURL
	}
	return s.renderPage(c, http.StatusOK, "returned.html", d)
}
