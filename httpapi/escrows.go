package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
)

func (s *Server) escrowRoutes() {
	optional := Policy{CID: CIDOptional}
	s.handle(http.MethodPost, "/v1/escrow/create", Policy{CID: CIDOptional, Permission: CanSell}, s.createEscrow, true)
	s.handle(http.MethodPut, "/v1/escrow/edit/:paymentToken", optional, s.editEscrow, true)
	s.handle(http.MethodDelete, "/v1/escrow/delete/:paymentToken", optional, s.deleteEscrow)
	s.handle(http.MethodGet, "/v1/escrow/verify/:paymentToken", optional, s.verifyEscrow)
	s.handle(http.MethodGet, "/v1/escrow/claim-funds/:paymentToken", optional, s.claimEscrow)
	s.handle(http.MethodPost, "/v1/escrow/confirm-payment/:escrowId", Policy{CID: CIDRequired}, s.confirmEscrow)
	s.handle(http.MethodPost, "/v1/escrow/extend-window/:paymentToken", Policy{CID: CIDRequired}, s.extendWindow)
	s.handle(http.MethodPost, "/v1/escrow/refund/:escrowId", Policy{CID: CIDForbidden}, s.partialRefund)
	s.handle(http.MethodGet, "/v1/escrow/transactions", optional, s.escrowTransactions)
	s.handle(http.MethodGet, "/v1/escrow/feeds", Policy{CID: CIDForbidden}, s.escrowFeeds)
	s.handle(http.MethodPut, "/v1/escrow/additional-fee/:paymentToken", Policy{CID: CIDForbidden, SuperAdmin: true}, s.setAdditionalFee)
	s.handle(http.MethodPost, "/v1/payment/escrow", Policy{CID: CIDRequired, Permission: CanBuy}, s.payEscrow)
}

// viewEscrows renders escrows for the acting customer (cid, "" for the
// merchant), looking each category up once.
// viewEscrows renders escrows for the acting customer. Their categories
// come from the event store, not the read models, so that a write answers
// without waiting for the projectors (readModels).
func (s *Server) viewEscrows(c echo.Context, list []escrow.State) ([]view.Escrow, error) {
	cid := sellerOf(c) // the acting customer
	cats := map[string]*view.Category{}
	out := make([]view.Escrow, 0, len(list))
	for _, e := range list {
		var cat *view.Category
		if id := e.Terms.CategoryID; id != "" {
			c2, ok := cats[id]
			if !ok {
				st, err := s.app.Category(c.Request().Context(), id)
				if err != nil {
					return nil, err
				}
				if st.Exists() {
					v := view.CategoryOf(st)
					c2 = &v
				}
				cats[id] = c2
			}
			cat = c2
		}
		out = append(out, view.RenderEscrow(e, cat, cid))
	}
	return out, nil
}

func (s *Server) viewEscrow(c echo.Context, e escrow.State) (view.Escrow, error) {
	v, err := s.viewEscrows(c, []escrow.State{e})
	if err != nil {
		return view.Escrow{}, err
	}
	return v[0], nil
}

// escrowFields reads a create or edit body: multipart form fields or JSON,
// both as raw JSON values so one parser serves both.
func escrowFields(c echo.Context) (map[string]json.RawMessage, error) {
	if vals, ok := formValues(c); ok {
		if _, err := multipartForm(c); err != nil {
			return nil, err
		}
		out := map[string]json.RawMessage{}
		for k, v := range vals {
			raw, _ := json.Marshal(v)
			out[k] = raw
		}
		return out, nil
	}
	out := map[string]json.RawMessage{}
	if err := decodeJSON(c, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func fieldString(f map[string]json.RawMessage, name string) (*string, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return nil, domain.Invalidf("%s must be a string", name)
	}
	return &v, nil
}

// fieldInt reads an integer sent as a number or a numeric string (multipart
// fields are always strings).
func fieldInt(f map[string]json.RawMessage, name, rule string) (*int, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	s := string(raw)
	var str string
	if json.Unmarshal(raw, &str) == nil {
		s = strings.TrimSpace(str)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, domain.Invalidf("%s", rule)
	}
	return &n, nil
}

func fieldAmount(f map[string]json.RawMessage, name string) (*money.Amount, error) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	a, err := money.InputOf(string(raw)).Integer()
	if err != nil {
		return nil, domain.Invalidf("%s must be an integer of at least 1000", name)
	}
	return &a, nil
}

// escrowPatch reads the fields shared by create and edit.
func escrowPatch(f map[string]json.RawMessage) (escrow.Patch, error) {
	var p escrow.Patch
	var err error
	if p.Amount, err = fieldAmount(f, "amount"); err != nil {
		return p, err
	}
	for _, sf := range []struct {
		name string
		dst  **string
	}{{"purpose", &p.Purpose}, {"description", &p.Description}, {"whoPays", &p.WhoPays},
		{"deliveryTimeline", &p.DeliveryTimeline}, {"categoryId", &p.CategoryID}} {
		if *sf.dst, err = fieldString(f, sf.name); err != nil {
			return p, err
		}
	}
	p.WhoPays, p.DeliveryTimeline = whoPaysEnum.canonicalPtr(p.WhoPays), deliveryTimelineEnum.canonicalPtr(p.DeliveryTimeline)
	if p.MaxDelivery, err = fieldInt(f, "maxDelivery", "maxDelivery must be an integer between 1 and 365"); err != nil {
		return p, err
	}
	if p.TotalQuantity, err = fieldInt(f, "totalQuantity", escrow.ErrQuantity.Message); err != nil {
		return p, err
	}
	if p.AutoRelease, err = fieldBool(f, "autoRelease"); err != nil {
		return p, err
	}
	return p, nil
}

// sellerOf is who acts (as the seller, on the selling routes): the
// customer-id, or "" (the merchant).
func sellerOf(c echo.Context) string {
	if cu, ok := CustomerFrom(c); ok {
		return cu.ID
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// newEscrowDraft reads a create request (standard or milestone): its
// fields, the draft of the escrow terms and the seller. whoPays is
// required unless whoPaysDefault.
func newEscrowDraft(c echo.Context, whoPaysDefault bool) (map[string]json.RawMessage, escrow.Draft, string, error) {
	f, err := escrowFields(c)
	if err != nil {
		return nil, escrow.Draft{}, "", err
	}
	p, err := escrowPatch(f)
	if err != nil {
		return nil, escrow.Draft{}, "", err
	}
	// What the request must hold to be read; the rules of the terms (a
	// purpose, the minimum amount, who may sell) are the domain's and the
	// application's, whose errors reach the client as they are.
	switch {
	case p.Amount == nil:
		return nil, escrow.Draft{}, "", domain.Invalidf("amount is required")
	case p.WhoPays == nil && !whoPaysDefault:
		return nil, escrow.Draft{}, "", domain.Invalidf("whoPays is required")
	}
	expires, err := fieldInt(f, "expiresInHours", "expiresInHours must be an integer between 1 and 720")
	if err != nil {
		return nil, escrow.Draft{}, "", err
	}
	return f, escrow.Draft{Amount: *p.Amount, Purpose: deref(p.Purpose), Description: deref(p.Description), WhoPays: deref(p.WhoPays),
		MaxDelivery: p.MaxDelivery, DeliveryTimeline: deref(p.DeliveryTimeline), TotalQuantity: p.TotalQuantity,
		CategoryID: deref(p.CategoryID), AutoRelease: p.AutoRelease, ExpiresInHours: expires}, sellerOf(c), nil
}

func (s *Server) createEscrow(c echo.Context) error {
	f, d, seller, err := newEscrowDraft(c, false)
	if err != nil {
		return err
	}
	linked, err := s.linkedImages(c, f)
	if err != nil {
		return err
	}
	saved, err := s.saveImages(c, escrow.MaxImagesAtCreation)
	if err != nil {
		return err
	}
	d.ImageURLs = append(saved, linked...)
	res, err := s.app.CreateEscrow(c.Request().Context(), actor(c), seller, d)
	if err != nil {
		s.removeFiles(c, saved)
		return err
	}
	return s.respondEscrow(c, res, http.StatusCreated, "Escrow created successfully")
}

// respondEscrow answers with the escrow as the command left it; the write
// does not wait for its read models (readModels).
func (s *Server) respondEscrow(c echo.Context, res app.EscrowResult, status int, msg string) error {
	v, err := s.viewEscrow(c, res.Escrow)
	if err != nil {
		return err
	}
	return respond(c, status, msg, v)
}

// escrowByToken resolves the path's payment token to an escrow id.
func (s *Server) escrowByToken(c echo.Context) (string, error) {
	q, err := s.readModels(c, projections.EscrowsName)
	if err != nil {
		return "", err
	}
	id, ok, err := q.EscrowIDByToken(c.Request().Context(), c.Param("paymentToken"))
	if err != nil {
		return "", err
	}
	if !ok {
		return "", escrow.ErrNotFound
	}
	return id, nil
}

// escrowChange reads an edit request of the escrow the path's payment
// token names: its id, fields and patch.
func (s *Server) escrowChange(c echo.Context) (string, map[string]json.RawMessage, escrow.Patch, error) {
	id, err := s.escrowByToken(c)
	if err != nil {
		return "", nil, escrow.Patch{}, err
	}
	f, err := escrowFields(c)
	if err != nil {
		return "", nil, escrow.Patch{}, err
	}
	p, err := escrowPatch(f)
	return id, f, p, err
}

func (s *Server) editEscrow(c echo.Context) error {
	id, f, p, err := s.escrowChange(c)
	if err != nil {
		return err
	}
	linked, err := s.linkedImages(c, f)
	if err != nil {
		return err
	}
	urls, err := s.saveImages(c, escrow.MaxImages)
	if err != nil {
		return err
	}
	p.AddImages = append(urls, linked...)
	res, err := s.app.EditEscrow(c.Request().Context(), actor(c), sellerOf(c), id, p)
	if err != nil {
		s.removeFiles(c, urls)
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Escrow updated successfully")
}

func (s *Server) deleteEscrow(c echo.Context) error {
	id, err := s.escrowByToken(c)
	if err != nil {
		return err
	}
	owned, err := s.app.EscrowFiles(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if _, err := s.app.DeleteEscrow(c.Request().Context(), actor(c), sellerOf(c), id); err != nil {
		return err
	}
	// A deleted escrow's files are not served any more.
	s.removeFiles(c, owned)
	return respond(c, http.StatusOK, "Escrow deleted successfully", map[string]any{})
}

func (s *Server) verifyEscrow(c echo.Context) error {
	q, err := s.readModels(c, projections.EscrowsName)
	if err != nil {
		return err
	}
	e, found, err := q.EscrowByToken(c.Request().Context(), c.Param("paymentToken"))
	if err != nil {
		return err
	}
	if !found {
		return escrow.ErrNotFound
	}
	p, _ := PrincipalFrom(c)
	if err := escrow.Owned(e, p.MerchantID, p.Environment); err != nil {
		return err
	}
	return s.respondEscrow(c, app.EscrowResult{Escrow: e}, http.StatusOK, "Escrow fetched successfully")
}

func (s *Server) claimEscrow(c echo.Context) error {
	id, err := s.escrowByToken(c)
	if err != nil {
		return err
	}
	res, err := s.app.ClaimEscrow(c.Request().Context(), actor(c), sellerOf(c), id)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Funds claimed successfully")
}

func (s *Server) confirmEscrow(c echo.Context) error {
	cu, _ := CustomerFrom(c)
	res, err := s.app.ConfirmEscrow(c.Request().Context(), actor(c), cu.ID, c.Param("escrowId"))
	if errors.Is(err, escrow.ErrNotFound) {
		return escrow.ErrActionNotAllowed
	}
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Payment confirmed successfully")
}

func (s *Server) setAdditionalFee(c echo.Context) error {
	var body struct {
		AdditionalFee           json.RawMessage `json:"additionalFee"`
		AdditionalFeeRefundable *bool           `json:"additionalFeeRefundable"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	if len(body.AdditionalFee) == 0 || string(body.AdditionalFee) == "null" {
		return domain.Invalidf("additionalFee is required")
	}
	fee, err := money.InputOf(string(body.AdditionalFee)).Integer()
	if err != nil || body.AdditionalFee[0] == '"' {
		return domain.Invalidf("additionalFee must be an integer")
	}
	id, err := s.escrowByToken(c)
	if err != nil {
		return err
	}
	res, err := s.app.SetAdditionalFee(c.Request().Context(), actor(c), id, fee, body.AdditionalFeeRefundable)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Additional fee updated successfully")
}

func (s *Server) payEscrow(c echo.Context) error {
	var body struct {
		Amount          money.Input     `json:"amount"`
		Reference       string          `json:"reference"`
		TransactionType string          `json:"transactionType"`
		Gateway         string          `json:"gateway"`
		EscrowDetails   json.RawMessage `json:"escrowDetails"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	body.TransactionType, body.Gateway = transactionTypeEnum.canonical(body.TransactionType), gatewayEnum.canonical(body.Gateway)
	if body.TransactionType != "" && body.TransactionType != string(ledger.EscrowPayment) {
		return domain.Invalidf("transactionType must be escrow")
	}
	switch body.Gateway {
	case "", "wallet":
	case "card":
		return domain.Errorf(domain.Forbidden, "This feature is not enabled on your merchant account")
	default:
		return domain.Invalidf("gateway must be wallet")
	}
	if err := ledger.ValidClientReference(body.Reference); err != nil {
		return err
	}
	amount, err := amountOf("amount", body.Amount)
	if err != nil {
		return err
	}
	ids, err := escrowIDsOf(body.EscrowDetails)
	if err != nil {
		return err
	}
	cu, _ := CustomerFrom(c)
	res, err := s.app.PayEscrows(c.Request().Context(), actor(c), cu.ID, cu.Permissions,
		app.EscrowPayment{Reference: body.Reference, Amount: amount, EscrowIDs: ids})
	if err != nil {
		return err
	}
	views, err := s.viewEscrows(c, res.Escrows)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Payment successful", struct {
		ledger.Record
		Escrows []view.Escrow `json:"escrows"`
	}{res.Record, views})
}

func (s *Server) escrowTransactions(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	f := projections.EscrowFilter{MerchantID: p.MerchantID, Environment: p.Environment,
		Status: strings.ToUpper(c.QueryParam("status")), CategoryID: c.QueryParam("categoryId")}
	party := sellerOf(c)
	switch escrowListingEnum.canonical(c.QueryParam("type")) {
	case "sales":
		f.SellerID = &party
	case "buy":
		if party == "" { // the merchant never buys
			return respond(c, http.StatusOK, "Transaction fetched successfully", map[string]any{
				"data": []any{}, "pagination": view.NewPagination(pageParams(c, historyCeiling), 0)})
		}
		f.BuyerID = &party
	default:
		return domain.Invalidf("type must be sales or buy")
	}
	return s.listEscrows(c, f, "Transaction fetched successfully")
}

func (s *Server) listEscrows(c echo.Context, f projections.EscrowFilter, msg string) error {
	return s.respondEscrowPage(c, msg, func(q *projections.Queries, p view.Page) ([]escrow.State, view.Pagination, error) {
		return q.Escrows(c.Request().Context(), f, p)
	})
}

// respondEscrowPage answers with one page of escrows that read selects
// from the read models (behind the read fence), rendered for the caller.
func (s *Server) respondEscrowPage(c echo.Context, msg string,
	read func(*projections.Queries, view.Page) ([]escrow.State, view.Pagination, error)) error {
	q, err := s.readModels(c, projections.EscrowsName)
	if err != nil {
		return err
	}
	list, pg, err := read(q, pageParams(c, historyCeiling))
	if err != nil {
		return err
	}
	views, err := s.viewEscrows(c, list)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, msg, map[string]any{"data": views, "pagination": pg})
}

func (s *Server) escrowFeeds(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	f := projections.EscrowFilter{MerchantID: p.MerchantID, Environment: p.Environment,
		Status: strings.ToUpper(c.QueryParam("status")), CategoryID: c.QueryParam("categoryId"),
		PartyID: c.QueryParam("customerId"), PaymentToken: c.QueryParam("paymentToken")}
	var err error
	if f.From, f.To, err = dateRange(c); err != nil {
		return err
	}
	return s.listEscrows(c, f, "Escrows fetched successfully")
}
