package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
)

func (s *Server) disputeRoutes() {
	s.handle(http.MethodPost, "/v1/escrow/submit-dispute/:paymentToken", Policy{CID: CIDRequired}, s.submitDispute, true)
	s.handle(http.MethodGet, "/v1/escrow/dispute/get", Policy{CID: CIDRequired}, s.customerDisputes)
	s.handle(http.MethodGet, "/v1/escrow/dispute/get/:escrowId", Policy{CID: CIDRequired}, s.disputeByEscrow)
	s.handle(http.MethodGet, "/v1/escrow/all-dispute", Policy{CID: CIDForbidden}, s.merchantDisputes)
	s.handle(http.MethodPost, "/v1/escrow/dispute/resolve/:escrowId", Policy{CID: CIDForbidden}, s.resolveDispute, true)
}

// disputeText reads a text field of a dispute request (multipart or JSON).
func disputeText(f map[string]json.RawMessage, name string) (string, error) {
	v, err := fieldString(f, name)
	if err != nil || v == nil {
		return "", err
	}
	return *v, nil
}

func (s *Server) submitDispute(c echo.Context) error {
	id, err := s.escrowByToken(c)
	if err != nil {
		return err
	}
	f, err := escrowFields(c)
	if err != nil {
		return err
	}
	msg, err := disputeText(f, "message")
	if err != nil {
		return err
	}
	if strings.TrimSpace(msg) == "" {
		return domain.Invalidf("message is required")
	}
	proof, err := s.saveEvidence(c)
	if err != nil {
		return err
	}
	cu, _ := CustomerFrom(c)
	res, err := s.app.SubmitDispute(c.Request().Context(), actor(c), cu.ID, id, msg, proof)
	if err != nil {
		s.removeFiles(c, []string{proof})
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Escrow dispute submitted successfully")
}

// fieldBool reads a boolean sent as JSON true/false or the strings "true"
// and "false" (multipart fields are always strings).
func fieldBool(f map[string]json.RawMessage, name string) (*bool, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	s := string(raw)
	var str string
	if json.Unmarshal(raw, &str) == nil {
		s = strings.ToLower(strings.TrimSpace(str))
	}
	b, err := strconv.ParseBool(s)
	if err != nil || (s != "true" && s != "false") {
		return nil, domain.Invalidf("%s must be true or false", name)
	}
	return &b, nil
}

// fieldDecimal reads an amount with at most 2 decimals.
func fieldDecimal(f map[string]json.RawMessage, name string) (*money.Amount, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	a, err := amountOf(name, money.InputOf(string(raw)))
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func (s *Server) resolveDispute(c echo.Context) error {
	f, err := escrowFields(c)
	if err != nil {
		return err
	}
	var r escrow.Resolution
	if r.Status, err = disputeText(f, "status"); err != nil {
		return err
	}
	if strings.TrimSpace(r.Status) == "" {
		return domain.Invalidf("status is required")
	}
	if r.SellerAmount, err = fieldDecimal(f, "sellerAmount"); err != nil {
		return err
	}
	if r.BuyerAmount, err = fieldDecimal(f, "buyerAmount"); err != nil {
		return err
	}
	if r.AdditionalFeeRefundable, err = fieldBool(f, "additionalFeeRefundable"); err != nil {
		return err
	}
	if r.Message, err = disputeText(f, "resolution"); err != nil {
		return err
	}
	if r.ProofURL, err = s.saveEvidence(c); err != nil {
		return err
	}
	res, err := s.app.ResolveDispute(c.Request().Context(), actor(c), c.Param("escrowId"), r)
	if err != nil {
		s.removeFiles(c, []string{r.ProofURL})
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Dispute resolved successfully")
}

// disputeFilter reads the filters the dispute listings share.
func disputeFilter(c echo.Context) (projections.DisputeFilter, error) {
	p, _ := PrincipalFrom(c)
	f := projections.DisputeFilter{MerchantID: p.MerchantID, Environment: p.Environment,
		PaymentToken: c.QueryParam("paymentToken")}
	var err error
	f.From, f.To, err = dateRange(c)
	return f, err
}

func (s *Server) listDisputes(c echo.Context, f projections.DisputeFilter) error {
	return s.respondEscrowPage(c, "Disputes fetched successfully",
		func(q *projections.Queries, p view.Page) ([]escrow.State, view.Pagination, error) {
			return q.Disputes(c.Request().Context(), f, p)
		})
}

// customerDisputes lists the disputes of escrows the customer buys or sells.
func (s *Server) customerDisputes(c echo.Context) error {
	f, err := disputeFilter(c)
	if err != nil {
		return err
	}
	f.PartyID = sellerOf(c)
	return s.listDisputes(c, f)
}

// merchantDisputes lists every disputed escrow of the merchant.
func (s *Server) merchantDisputes(c echo.Context) error {
	f, err := disputeFilter(c)
	if err != nil {
		return err
	}
	f.PaymentID, f.Status = c.QueryParam("paymentId"), strings.ToUpper(c.QueryParam("status"))
	return s.listDisputes(c, f)
}

// disputeByEscrow is one escrow with its dispute, for its buyer or seller.
func (s *Server) disputeByEscrow(c echo.Context) error {
	q, err := s.readModels(c, projections.EscrowsName)
	if err != nil {
		return err
	}
	e, found, err := q.EscrowByID(c.Request().Context(), c.Param("escrowId"))
	if err != nil {
		return err
	}
	p, _ := PrincipalFrom(c)
	if !found {
		return escrow.ErrNotFound
	}
	if err := escrow.Owned(e, p.MerchantID, p.Environment); err != nil {
		return err
	}
	if cid := sellerOf(c); cid != e.BuyerID && cid != e.SellerID {
		return escrow.ErrAccessDenied
	}
	return s.respondEscrow(c, app.EscrowResult{Escrow: e}, http.StatusOK, "Dispute fetched successfully")
}
