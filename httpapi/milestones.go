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
	"github.com/escrowd/escrowd/domain/money"
)

func (s *Server) milestoneRoutes() {
	optional := Policy{CID: CIDOptional}
	s.handle(http.MethodPost, "/v1/escrow/milestone/create", Policy{CID: CIDOptional, Permission: CanSell}, s.createMilestoneEscrow)
	s.handle(http.MethodPut, "/v1/escrow/milestone/edit/:paymentToken", optional, s.editMilestoneEscrow)
	s.handle(http.MethodPut, "/v1/escrow/milestone/convert/:paymentToken", optional, s.convertToMilestones)
	s.handle(http.MethodGet, "/v1/escrow/milestone/:paymentToken", optional, s.verifyEscrow)
	s.handle(http.MethodPost, "/v1/escrow/milestone/confirm/:escrowId/:milestoneId", Policy{CID: CIDRequired}, s.confirmMilestone)
}

// milestoneDrafts reads the milestones field: a JSON array, or the same
// array as a string (a multipart field). nil when absent.
func milestoneDrafts(f map[string]json.RawMessage) ([]escrow.MilestoneDraft, error) {
	raw, ok := f["milestones"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		raw = json.RawMessage(str)
	}
	var in []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, domain.Invalidf("milestones must be an array of milestones")
	}
	out := make([]escrow.MilestoneDraft, len(in))
	for i, m := range in {
		field := func(name string) string { return "milestones[" + strconv.Itoa(i) + "]." + name }
		var text [4]string
		for k, name := range []string{"title", "description", "customerId", "dueDate"} {
			v, err := fieldString(m, name)
			if err != nil {
				return nil, domain.Invalidf("%s must be a string", field(name))
			}
			text[k] = deref(v)
		}
		d := escrow.MilestoneDraft{Title: text[0], Description: text[1], CustomerID: strings.TrimSpace(text[2])}
		due := text[3]
		var err error
		raw, ok := m["amount"]
		if !ok || string(raw) == "null" {
			return nil, domain.Invalidf("%s is required", field("amount"))
		}
		if d.Amount, err = money.InputOf(string(raw)).Integer(); err != nil {
			return nil, domain.Invalidf("%s must be a positive integer", field("amount"))
		}
		if due != "" {
			t, err := parseDateBound(due, false)
			if err != nil {
				return nil, domain.Invalidf("%s must be a date (YYYY-MM-DD) or an RFC 3339 time", field("dueDate"))
			}
			d.DueDate = &t
		}
		out[i] = d
	}
	return out, nil
}

func (s *Server) createMilestoneEscrow(c echo.Context) error {
	f, d, seller, err := newEscrowDraft(c, true)
	if err != nil {
		return err
	}
	drafts, err := milestoneDrafts(f)
	if err != nil {
		return err
	}
	res, err := s.app.CreateMilestoneEscrow(c.Request().Context(), actor(c), seller, d, drafts)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusCreated, "Milestone escrow created successfully")
}

func (s *Server) editMilestoneEscrow(c echo.Context) error {
	id, f, p, err := s.escrowChange(c)
	if err != nil {
		return err
	}
	drafts, err := milestoneDrafts(f)
	if err != nil {
		return err
	}
	res, err := s.app.EditMilestoneEscrow(c.Request().Context(), actor(c), sellerOf(c), id, p, drafts)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Milestone escrow updated successfully")
}

func (s *Server) convertToMilestones(c echo.Context) error {
	id, f, p, err := s.escrowChange(c)
	if err != nil {
		return err
	}
	amount := p.Amount
	drafts, err := milestoneDrafts(f)
	if err != nil {
		return err
	}
	if drafts == nil {
		return domain.Invalidf("milestones is required")
	}
	res, err := s.app.ConvertToMilestones(c.Request().Context(), actor(c), sellerOf(c), id, amount, drafts)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Escrow converted to a milestone escrow successfully")
}

func (s *Server) confirmMilestone(c echo.Context) error {
	cu, _ := CustomerFrom(c)
	res, err := s.app.ConfirmMilestone(c.Request().Context(), actor(c), cu.ID, c.Param("escrowId"), c.Param("milestoneId"))
	if errors.Is(err, escrow.ErrNotFound) {
		return escrow.ErrActionNotAllowed
	}
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, "Milestone confirmed successfully")
}
