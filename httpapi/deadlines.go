package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
)

// extendWindow is the buyer's extension of an ONGOING escrow's delivery
// window: {by} units of its deliveryTimeline.
func (s *Server) extendWindow(c echo.Context) error {
	id, err := s.escrowByToken(c)
	if err != nil {
		return err
	}
	body := map[string]json.RawMessage{}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	by, err := fieldInt(body, "by", "by must be a positive integer")
	if err != nil {
		return err
	}
	if by == nil {
		return domain.Invalidf("by is required")
	}
	cu, _ := CustomerFrom(c)
	res, err := s.app.ExtendWindow(c.Request().Context(), actor(c), cu.ID, id, *by)
	if errors.Is(err, escrow.ErrNotFound) {
		return escrow.ErrActionNotAllowed
	}
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Delivery window extended successfully")
}

// partialRefund is the merchant's return of {amount} of an ONGOING or
// DISPUTED standard escrow to its buyer; the escrow stays open with the
// rest.
func (s *Server) partialRefund(c echo.Context) error {
	body := map[string]json.RawMessage{}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	amount, err := fieldDecimal(body, "amount")
	if err != nil {
		return err
	}
	if amount == nil {
		return domain.Invalidf("amount is required")
	}
	res, err := s.app.PartialRefund(c.Request().Context(), actor(c), c.Param("escrowId"), *amount)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Escrow partially refunded successfully")
}
