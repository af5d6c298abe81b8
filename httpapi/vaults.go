package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
)

// vaultRoutes: the merchant's pooled stakes (merchant only: customer-id is
// forbidden on all four; any key role).
func (s *Server) vaultRoutes() {
	merchantOnly := Policy{CID: CIDForbidden}
	s.handle(http.MethodPost, "/v1/escrow/vault/create", merchantOnly, s.createVault)
	s.handle(http.MethodPost, "/v1/escrow/vault/winner/:paymentToken", merchantOnly, s.declareVaultWinner)
	s.handle(http.MethodPost, "/v1/escrow/vault/cancel/:paymentToken", merchantOnly, s.cancelVault)
	// The vault with its participants and, once declared, its winner: the
	// escrow read, as the milestone read is (any escrow of the merchant).
	s.handle(http.MethodGet, "/v1/escrow/vault/:paymentToken", merchantOnly, s.verifyEscrow)
}

// vaultDraft reads a create body: purpose, description, categoryId and
// participants [{customerId, amount}] (amount a whole number of naira).
func vaultDraft(c echo.Context) (escrow.VaultDraft, error) {
	var body struct {
		Purpose      string          `json:"purpose"`
		Description  string          `json:"description"`
		CategoryID   string          `json:"categoryId"`
		Participants json.RawMessage `json:"participants"`
	}
	d := escrow.VaultDraft{}
	if err := decodeJSON(c, &body); err != nil {
		return d, err
	}
	d.Purpose, d.Description, d.CategoryID = body.Purpose, body.Description, body.CategoryID
	if len(body.Participants) == 0 || string(body.Participants) == "null" {
		return d, escrow.ErrVaultParticipants
	}
	var parts []struct {
		CustomerID json.RawMessage `json:"customerId"`
		Amount     money.Input     `json:"amount"`
	}
	if json.Unmarshal(body.Participants, &parts) != nil {
		return d, domain.Invalidf("participants must be an array of {customerId, amount}")
	}
	for i, p := range parts {
		var id string
		if len(p.CustomerID) > 0 && json.Unmarshal(p.CustomerID, &id) != nil {
			return d, domain.Invalidf("participants[%d].customerId must be a string", i)
		}
		if !p.Amount.Present() {
			return d, domain.Invalidf("participants[%d].amount is required", i)
		}
		amount, err := p.Amount.Integer()
		if err != nil {
			return d, domain.Invalidf("participants[%d].amount must be a positive integer", i)
		}
		d.Participants = append(d.Participants, escrow.Stake{CustomerID: id, Amount: amount})
	}
	return d, nil
}

func (s *Server) createVault(c echo.Context) error {
	d, err := vaultDraft(c)
	if err != nil {
		return err
	}
	res, err := s.app.CreateVault(c.Request().Context(), actor(c), d)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusCreated, "Vault created successfully")
}

func (s *Server) declareVaultWinner(c echo.Context) error {
	var body struct {
		WinnerID json.RawMessage `json:"winnerId"`
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	var winner string
	if len(body.WinnerID) > 0 && string(body.WinnerID) != "null" && json.Unmarshal(body.WinnerID, &winner) != nil {
		return domain.Invalidf("winnerId must be a string")
	}
	return s.settleVault(c, "Vault winner declared successfully", func(id string) (app.EscrowResult, error) {
		return s.app.DeclareVaultWinner(c.Request().Context(), actor(c), id, winner)
	})
}

func (s *Server) cancelVault(c echo.Context) error {
	return s.settleVault(c, "Vault cancelled successfully", func(id string) (app.EscrowResult, error) {
		return s.app.CancelVault(c.Request().Context(), actor(c), id)
	})
}

// settleVault runs a winner or a cancel on the path's vault and answers
// with the settled vault.
func (s *Server) settleVault(c echo.Context, msg string, settle func(id string) (app.EscrowResult, error)) error {
	id, err := s.escrowByToken(c)
	if err != nil {
		return err
	}
	res, err := settle(id)
	if err != nil {
		return err
	}
	return s.respondEscrow(c, res, http.StatusOK, msg)
}
