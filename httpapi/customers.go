package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
)

func (s *Server) customerRoutes() {
	sa := Policy{CID: CIDForbidden, SuperAdmin: true}
	s.handle(http.MethodPost, "/v1/customer/create", sa, s.createCustomer)
	s.handle(http.MethodGet, "/v1/customer/get/:customerId", Policy{CID: CIDForbidden}, s.getCustomer)
	s.handle(http.MethodGet, "/v1/customers", Policy{CID: CIDForbidden}, s.listCustomers)
	s.handle(http.MethodPut, "/v1/customer/update/:customerId", sa, s.updateCustomer)
	s.handle(http.MethodPut, "/v1/customer/permissions/:customerId", sa, s.setPermissions)
	s.handle(http.MethodPut, "/v1/customer/block/:customerId", sa, s.blockCustomer(true))
	s.handle(http.MethodPut, "/v1/customer/unblock/:customerId", sa, s.blockCustomer(false))
	s.handle(http.MethodGet, "/v1/payment/verify-phone/:phone", Policy{CID: CIDIgnored}, s.verifyPhone)
	s.handle(http.MethodGet, "/v1/countries", Policy{CID: CIDIgnored}, s.countries)
	s.handle(http.MethodGet, "/v1/payment/bank-list", Policy{CID: CIDIgnored}, s.bankList)
}

// ownCustomer reads a customer of the caller's merchant and environment.
func (s *Server) ownCustomer(c echo.Context, id string) (projections.Customer, bool, error) {
	p, _ := PrincipalFrom(c)
	q, err := s.readModels(c, projections.CustomersName)
	if err != nil {
		return projections.Customer{}, false, err
	}
	cu, ok, err := q.CustomerByID(c.Request().Context(), id)
	if err != nil || !ok {
		return cu, false, err
	}
	if cu.MerchantID != p.MerchantID || cu.Environment != string(p.Environment) {
		return cu, false, nil
	}
	return cu, true, nil
}

func (s *Server) createCustomer(c echo.Context) error {
	var body struct {
		Firstname string `json:"firstname"`
		Lastname  string `json:"lastname"`
		Email     string `json:"email"`
		Phone     string `json:"phone"`
		CountryID string `json:"countryId"`
		BVN       string `json:"bvn"`
		DOB       string `json:"dob"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	id, pos, err := s.app.CreateCustomer(c.Request().Context(), actor(c), customer.NewCustomer{
		Firstname: body.Firstname, Lastname: body.Lastname, Email: body.Email, Phone: body.Phone,
		CountryID: body.CountryID, BVN: body.BVN, DOB: body.DOB})
	if err != nil {
		return err
	}
	if err := s.awaitWrite(c, pos, projections.CustomersName); err != nil {
		return err
	}
	cu, _, err := s.ownCustomer(c, id)
	if err != nil {
		return err
	}
	return respond(c, http.StatusCreated, "Customer created successfully", cu)
}

func (s *Server) getCustomer(c echo.Context) error {
	cu, ok, err := s.ownCustomer(c, c.Param("customerId"))
	if err != nil {
		return err
	}
	if !ok {
		return domain.Invalidf("Customer not found")
	}
	return respond(c, http.StatusOK, "Customer fetched successfully", cu)
}

func (s *Server) listCustomers(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	ctx := c.Request().Context()
	emailQ, phoneQ := strings.TrimSpace(c.QueryParam("email")), strings.TrimSpace(c.QueryParam("phone"))
	if emailQ == "" && phoneQ == "" {
		q, err := s.readModels(c, projections.CustomersName)
		if err != nil {
			return err
		}
		list, pg, err := q.ListCustomers(ctx, p.MerchantID, p.Environment, pageParams(c, 50))
		if err != nil {
			return err
		}
		return respond(c, http.StatusOK, "Customers fetched successfully", map[string]any{"data": list, "pagination": pg})
	}
	what := map[[2]bool]string{{true, false}: "email", {false, true}: "phone", {true, true}: "email and phone"}[[2]bool{emailQ != "", phoneQ != ""}]
	notFound := domain.Invalidf("No customer found with the provided %s", what)
	var phones []string
	if phoneQ != "" {
		phones = s.phoneCandidates(c, phoneQ)
	}
	q, err := s.readModels(c, projections.CustomersName)
	if err != nil {
		return err
	}
	cu, ok, err := s.findCustomer(ctx, q, p, strings.ToLower(emailQ), phones, phoneQ != "")
	if err != nil {
		return err
	}
	if !ok {
		return notFound
	}
	return respond(c, http.StatusOK, "Customers fetched successfully", map[string]any{
		"data": []projections.Customer{cu}, "pagination": view.NewPagination(view.Page{Page: 1, Limit: 1}, 1)})
}

// phoneCandidates are the stored forms a phone spelling may denote,
// the merchant's own country first.
func (s *Server) phoneCandidates(c echo.Context, raw string) []string {
	p, _ := PrincipalFrom(c)
	pref, ok := reference.FindCountry(p.Country)
	if !ok {
		pref = reference.Countries[0]
	}
	return reference.PhoneCandidates(pref, raw)
}

// findCustomer is the customer holding email ("" for any) and, byPhone,
// one of phones: the holders come from the reservations (by blind index),
// the customer from the read model.
func (s *Server) findCustomer(ctx context.Context, q *projections.Queries, p Principal, email string, phones []string, byPhone bool) (projections.Customer, bool, error) {
	if byPhone && len(phones) == 0 {
		return projections.Customer{}, false, nil
	}
	byEmail, byPhones, err := s.app.CustomersByContact(ctx, p.MerchantID, p.Environment, email, phones)
	if err != nil {
		return projections.Customer{}, false, err
	}
	ids := byPhones
	switch {
	case email != "" && byPhone:
		ids = nil
		if slices.Contains(byPhones, byEmail) {
			ids = []string{byEmail}
		}
	case email != "":
		ids = nil
		if byEmail != "" {
			ids = []string{byEmail}
		}
	}
	return q.FirstCustomerOf(ctx, p.MerchantID, p.Environment, ids)
}

func (s *Server) verifyPhone(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	phones := s.phoneCandidates(c, c.Param("phone"))
	q, err := s.readModels(c, projections.CustomersName)
	if err != nil {
		return err
	}
	cu, ok, err := s.findCustomer(c.Request().Context(), q, p, "", phones, true)
	if err != nil {
		return err
	}
	if !ok {
		return domain.Invalidf("No customer found with the provided phone")
	}
	return respond(c, http.StatusOK, "Customer fetched successfully", cu)
}

func (s *Server) updateCustomer(c echo.Context) error {
	var body struct {
		Firstname *string `json:"firstname"`
		Lastname  *string `json:"lastname"`
		Email     *string `json:"email"`
		Phone     *string `json:"phone"`
		BVN       *string `json:"bvn"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	if body.Phone != nil || body.BVN != nil {
		return domain.Invalidf("phone and bvn cannot be changed")
	}
	id := c.Param("customerId")
	pos, err := s.app.UpdateCustomer(c.Request().Context(), actor(c), id,
		customer.Update{Firstname: body.Firstname, Lastname: body.Lastname, Email: body.Email})
	if err != nil {
		return err
	}
	return s.respondCustomer(c, id, pos, "Customer updated successfully")
}

func (s *Server) respondCustomer(c echo.Context, id string, pos eventstore.Position, msg string) error {
	if err := s.awaitWrite(c, pos, projections.CustomersName); err != nil {
		return err
	}
	cu, ok, err := s.ownCustomer(c, id)
	if err != nil {
		return err
	}
	if !ok {
		return domain.Invalidf("Customer not found")
	}
	return respond(c, http.StatusOK, msg, cu)
}

func (s *Server) setPermissions(c echo.Context) error {
	var body struct {
		CanBuy      *bool `json:"canBuy"`
		CanSell     *bool `json:"canSell"`
		CanWithdraw *bool `json:"canWithdraw"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	id := c.Param("customerId")
	pos, err := s.app.SetPermissions(c.Request().Context(), actor(c), id, body.CanBuy, body.CanSell, body.CanWithdraw)
	if err != nil {
		return err
	}
	return s.respondCustomer(c, id, pos, "Customer permissions updated successfully")
}

func (s *Server) blockCustomer(block bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Reason string `json:"reason"`
		}
		if err := decodeJSON(c, &body); err != nil {
			return err
		}
		id := c.Param("customerId")
		pos, err := s.app.SetBlocked(c.Request().Context(), actor(c), id, block, strings.TrimSpace(body.Reason))
		if err != nil {
			return err
		}
		msg := "Customer blocked successfully"
		if !block {
			msg = "Customer unblocked successfully"
		}
		return s.respondCustomer(c, id, pos, msg)
	}
}

// countryView is a country as listed: with code, the ISO code again, which
// clients of the public API read.
type countryView struct {
	reference.Country
	Code string `json:"code"`
}

// countryViews is the listing, built once: the countries never change
// while the server runs.
var countryViews = func() []countryView {
	out := make([]countryView, len(reference.Countries))
	for i, c := range reference.Countries {
		out[i] = countryView{Country: c, Code: c.ISOCode}
	}
	return out
}()

func (s *Server) countries(c echo.Context) error {
	return respond(c, http.StatusOK, "Countries fetched successfully", countryViews)
}

func (s *Server) bankList(c echo.Context) error {
	return respond(c, http.StatusOK, "Banks fetched successfully", reference.Banks)
}
