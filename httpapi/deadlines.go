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
