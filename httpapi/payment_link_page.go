package httpapi

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
)

// The payment link: GET /escrow/{paymentToken}, the buyer's page of an
// escrow without a key, as the public escrow API serves one. The buyer
// reads the terms and gives name, email and phone; the merchant's customer
// with that email (created when there is none) gets a checkout session
// that pays only with a deposit made for it, and the buyer is sent there.
// The page has the checkout page's headers; its form's anti-forgery token
// is a random value the page sets both in a cookie and in the form (there
// is no session yet to keep it in), compared on POST.

// linkCookie carries the link form's anti-forgery token.
const linkCookie = "escrowd_link_form"

// linkForm is what a buyer typed, shown again beside a refusal.
type linkForm struct{ Firstname, Lastname, Email, Phone string }

func (s *Server) paymentLinkRoutes() {
	g := s.e.Group("/escrow", s.checkoutHeaders)
	g.GET("/:paymentToken", s.paymentLinkPage)
	g.POST("/:paymentToken", s.paymentLinkOpen, bodyLimit(64<<10))
}

// linkEscrow resolves the page's payment token, answering the not-found
// page itself when ok is false.
func (s *Server) linkEscrow(c echo.Context) (id string, ok bool, err error) {
	id, err = s.escrowIDByToken(c, c.Param("paymentToken"))
	if errors.Is(err, escrow.ErrNotFound) {
		return "", false, s.renderPage(c, http.StatusNotFound, "notfound.html", pageData{Title: "Payment link not found"})
	}
	return id, err == nil, err
}

func (s *Server) paymentLinkPage(c echo.Context) error {
	id, ok, err := s.linkEscrow(c)
	if !ok {
		return err
	}
	return s.renderLink(c, id, http.StatusOK, "", linkForm{})
}

// renderLink renders escrow id's link page with a fresh form token, and
// message (when not "") as a refusal under status.
func (s *Server) renderLink(c echo.Context, escrowID string, status int, message string, form linkForm) error {
	v, err := s.app.PaymentLink(c.Request().Context(), escrowID)
	if err != nil {
		s.log.Error("payment link page failed", errField(err), reqField(c))
		return s.renderPage(c, http.StatusInternalServerError, "problem.html", pageData{Title: "Something went wrong",
			Error: "Something went wrong on our side. Nothing was paid. Please try again in a moment."})
	}
	e := v.Escrow
	d := pageData{Title: "Pay " + naira(e.Due()) + " to " + v.Merchant.Name, ID: e.PaymentToken, View: v,
		Delivery: deliveryInWords(e.Terms), Total: e.Due(), Live: e.Environment == domain.Live, Error: message, Form: form}
	d.CanPay = e.Allows(escrow.ActPay) && !(e.MultiUnit && e.TotalQuantity < 1)
	if !d.CanPay {
		d.Error, status = "This escrow can no longer be paid. Nothing was charged; ask the merchant for a new link.", http.StatusGone
	}
	d.Token = rand.Text()
	c.SetCookie(&http.Cookie{Name: linkCookie, Value: d.Token, Path: "/escrow/", HttpOnly: true,
		Secure: strings.HasPrefix(s.cfg.PublicURL, "https://"), SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	return s.renderPage(c, status, "link.html", d)
}

// paymentLinkOpen takes the buyer's details and sends the buyer to the
// checkout session opened for them.
func (s *Server) paymentLinkOpen(c echo.Context) error {
	id, ok, err := s.linkEscrow(c)
	if !ok {
		return err
	}
	cookie, cerr := c.Cookie(linkCookie)
	got := c.Request().PostFormValue("token") // the form's body only, as the checkout page's
	if cerr != nil || cookie.Value == "" || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(got)) != 1 {
		return s.renderPage(c, http.StatusForbidden, "problem.html", pageData{Title: "Form expired",
			Error: "This form is no longer valid. Reload the payment page and try again."})
	}
	if s.limiter != nil {
		// Keyless, and it may create a customer: each address gets the
		// per-key allowance of requests.
		dec, err := s.limiter.Allow(c.Request().Context(), "payment-link:"+c.RealIP(), s.app.Now())
		if err != nil {
			return err
		}
		if !dec.Allowed {
			return s.renderLink(c, id, http.StatusTooManyRequests, "Too many attempts from your network. Wait a minute and try again.", linkForm{})
		}
	}
	r := c.Request()
	form := linkForm{Firstname: r.PostFormValue("firstname"), Lastname: r.PostFormValue("lastname"),
		Email: r.PostFormValue("email"), Phone: r.PostFormValue("phone")}
	res, err := s.app.OpenLinkCheckout(r.Context(), id, customer.NewCustomer{Firstname: form.Firstname,
		Lastname: form.Lastname, Email: form.Email, Phone: form.Phone})
	var de *domain.Error
	switch {
	case errors.As(err, &de):
		return s.renderLink(c, id, statusOf(de.Code), de.Message, form)
	case err != nil:
		s.log.Error("payment link failed", errField(err), reqField(c), zap.String("escrow", id))
		return s.renderPage(c, http.StatusInternalServerError, "problem.html", pageData{Title: "Something went wrong",
			Error: "Something went wrong on our side. Nothing was paid. Please try again in a moment."})
	}
	return c.Redirect(http.StatusSeeOther, "/checkout/"+res.Session.ID)
}
