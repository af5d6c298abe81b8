package app

import (
	"context"
	"fmt"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/payment"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Service is the application: one method per use case.
type Service struct {
	Engine *Engine
	// Gateways per environment; an environment without an entry has no
	// deposits or payouts. NewService configures the test gateways on test.
	Gateways map[domain.Environment]gateway.Set
	// CryptoMaster is the BSC master wallet address per environment; crypto
	// payouts are configured only where it is set.
	CryptoMaster map[domain.Environment]string
	// IDs issues the ids of new records and payment links.
	IDs IDs
	// PayoutPollAfter is how long an accepted payout waits for the
	// provider's event before the resumer asks the provider (default
	// payment.PayoutPollAfter).
	PayoutPollAfter time.Duration
	// LeaseClock is the time payout leases are taken, compared and given
	// up by, and so every time written into a payout's life: one clock all
	// instances share (the database's; see postgres.Clock), so that an
	// instance whose own clock runs ahead never takes a lease another
	// still holds, nor one behind keeps recording after its lease ended.
	// nil: the engine's clock (a single process).
	LeaseClock func(context.Context) (time.Time, error)
	// BlindIndex is a keyed hash of a personal value that names a stream
	// (a customer's email or phone, a payout's bank account, a dedicated
	// account's number; the purposes are in customers.go); nil: the values
	// themselves (a service without a keyring).
	BlindIndex func(ctx context.Context, purpose, value string) (string, error)
	// accountNames keeps the provider's account resolutions (accounts.go).
	accountNames accountNames
	// vaultLocks queue the commands of vaults sharing a wallet (vaults.go).
	vaultLocks walletLocks
}

// NewService returns the application over engine.
func NewService(engine *Engine) *Service {
	return &Service{Engine: engine, Gateways: map[domain.Environment]gateway.Set{domain.Test: gateway.Test()},
		CryptoMaster: map[domain.Environment]string{}, IDs: newIDs()}
}

// Actor identifies who issues a command (for event metadata).
type Actor struct {
	MerchantID  string
	Environment domain.Environment
	KeyID       string // "" for operator commands and background jobs
	RequestID   string
	// Agent names a background job acting for the merchant (the payout
	// resumer); "" for requests and operator commands.
	Agent string
	// User is the dashboard user who acts (their user id); "" for API
	// keys, operator commands and background jobs.
	User string
}

func (a Actor) meta() domain.Meta {
	actor := a.KeyID
	if a.User != "" {
		actor = a.User
	}
	if actor == "" {
		actor = "operator"
		if a.Agent != "" {
			actor = a.Agent
		}
	}
	return domain.Meta{MerchantID: a.MerchantID, Environment: a.Environment, Actor: actor, RequestID: a.RequestID}
}

// leaseNow is the time on the lease clock.
func (s *Service) leaseNow(ctx context.Context) (time.Time, error) {
	if s.LeaseClock == nil {
		return s.Engine.Now(), nil
	}
	now, err := s.LeaseClock(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("app: read the lease clock: %w", err)
	}
	return now, nil
}

func (s *Service) payoutPollAfter() time.Duration {
	if s.PayoutPollAfter > 0 {
		return s.PayoutPollAfter
	}
	return payment.PayoutPollAfter
}

// newID is an internal identifier (merchants, keys, payout lease
// holders): a UUID, as the event ids are.
func (s *Service) newID() string { return s.Engine.NewID().String() }

// newRecordID is the id of a new record the API shows (IDs.Record).
func (s *Service) newRecordID() string { return s.IDs.Record(s.Engine.Now()) }
