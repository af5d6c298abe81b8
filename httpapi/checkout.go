package httpapi

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/checkout"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// Hosted checkout: the merchant's server opens a
// session through the API; the buyer pays on the page the session's url
// serves (checkout_page.go).
func (s *Server) checkoutRoutes() {
	s.handle(http.MethodPost, "/v1/checkout/sessions", Policy{CID: CIDForbidden}, s.openCheckout)
	s.handle(http.MethodGet, "/v1/checkout/sessions/:id", Policy{CID: CIDForbidden}, s.getCheckout)
	s.checkoutPageRoutes()
	s.paymentLinkRoutes()
}

// checkoutSessionView is a session as the API shows it.
type checkoutSessionView struct {
	ID           string          `json:"id"`
	URL          string          `json:"url"`
	PaymentToken string          `json:"paymentToken"`
	CustomerID   string          `json:"customerId"`
	AmountDue    money.Amount    `json:"amountDue"`
	Status       checkout.Status `json:"status"`
	ExpiresAt    time.Time       `json:"expiresAt"`
	SuccessURL   string          `json:"successUrl"`
	CancelURL    string          `json:"cancelUrl"`
	Reference    string          `json:"reference,omitempty"`
	CreatedAt    time.Time       `json:"createdAt"`
}

func (s *Server) checkoutURL(id string) string {
	return strings.TrimRight(s.cfg.PublicURL, "/") + "/checkout/" + id
}

// checkoutReturnURL is where the provider sends a payer back after a card,
// bank or USSD payment.
func (s *Server) checkoutReturnURL() string {
	return strings.TrimRight(s.cfg.PublicURL, "/") + "/checkout/return"
}

func (s *Server) viewCheckout(st checkout.State) checkoutSessionView {
	return checkoutSessionView{ID: st.ID, URL: s.checkoutURL(st.ID), PaymentToken: st.PaymentToken,
		CustomerID: st.CustomerID, AmountDue: st.AmountDue, Status: st.StatusAt(s.app.Now()),
		ExpiresAt: st.ExpiresAt, SuccessURL: st.SuccessURL, CancelURL: st.CancelURL, Reference: st.Reference,
		CreatedAt: st.CreatedAt}
}

func (s *Server) openCheckout(c echo.Context) error {
	var body struct {
		PaymentToken     string `json:"paymentToken"`
		CustomerID       string `json:"customerId"`
		SuccessURL       string `json:"successUrl"`
		CancelURL        string `json:"cancelUrl"`
		ExpiresInMinutes *int   `json:"expiresInMinutes"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	if strings.TrimSpace(body.PaymentToken) == "" {
		return checkout.ErrMissingEscrow
	}
	if strings.TrimSpace(body.CustomerID) == "" {
		return checkout.ErrMissingCustomer
	}
	minutes := 0
	if body.ExpiresInMinutes != nil {
		if minutes = *body.ExpiresInMinutes; minutes == 0 {
			return checkout.ErrBadLifetime // 0 is not "the default" when sent
		}
	}
	if err := checkout.CheckLifetime(minutes); err != nil {
		return err
	}
	id, err := s.escrowIDByToken(c, body.PaymentToken)
	if err != nil {
		return err
	}
	res, err := s.app.OpenCheckout(c.Request().Context(), actor(c), app.CheckoutRequest{EscrowID: id,
		CustomerID: body.CustomerID, SuccessURL: body.SuccessURL, CancelURL: body.CancelURL, ExpiresInMinutes: minutes})
	if err != nil {
		return err
	}
	return respond(c, http.StatusCreated, "Checkout session created successfully", s.viewCheckout(res.Session))
}

// escrowIDByToken resolves a payment token to an escrow id.
func (s *Server) escrowIDByToken(c echo.Context, token string) (string, error) {
	q, err := s.readModels(c, projections.EscrowsName)
	if err != nil {
		return "", err
	}
	id, ok, err := q.EscrowIDByToken(c.Request().Context(), token)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", escrow.ErrNotFound
	}
	return id, nil
}

func (s *Server) getCheckout(c echo.Context) error {
	st, err := s.app.OwnCheckout(c.Request().Context(), actor(c), c.Param("id"))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Checkout session fetched successfully", s.viewCheckout(st))
}

// formTokenValid compares a form's anti-forgery token with the session's
// in constant time.
func formTokenValid(st checkout.State, got string) bool {
	return st.FormToken != "" && subtle.ConstantTimeCompare([]byte(st.FormToken), []byte(got)) == 1
}

// errForgedForm refuses a page action whose token is not the session's.
var errForgedForm = domain.Errorf(domain.Forbidden, "This form is no longer valid. Reload the checkout page and try again.")
