package paystackgw

import (
	"errors"

	"github.com/escrowd/escrowd/internal/gateway"
)

// Config is one environment's Paystack configuration.
type Config struct {
	SecretKey string
	// BaseURL is Paystack's API (https://api.paystack.co; tests and
	// trials point it at a simulator).
	BaseURL string
	// DVABank is the preferred_bank of customers' dedicated accounts.
	DVABank string
}

// ErrNoClient: this build binds no Paystack HTTP client to Client yet, so
// an environment configured for Paystack cannot start.
var ErrNoClient = errors.New("paystack: this build has no Paystack HTTP client; set the provider to builtin (test) or leave it unset (live)")

// NewClient binds the Paystack HTTP client to Client, and returns the
// transfer reference derivation of the provider's alphabet with it.
//
// It is the one seam between the Paystack HTTP client and the gateway
// ports: until the client is in this build it refuses (ErrNoClient), and
// the service refuses to start rather than offer payments that nothing
// performs.
func NewClient(cfg Config) (Client, func(recordID string) string, error) {
	_ = cfg
	return nil, nil, ErrNoClient
}

// New is an environment's gateways on Paystack: bank payouts, recipients,
// account resolution and inbound events. Collection is not adapted yet
// (dedicated accounts, charges), so deposits keep answering that payments
// are not configured.
func New(cfg Config) (gateway.Set, error) {
	if cfg.SecretKey == "" {
		return gateway.Set{}, errors.New("paystack: no secret key")
	}
	client, ref, err := NewClient(cfg)
	if err != nil {
		return gateway.Set{}, err
	}
	return Gateways(cfg, client, ref), nil
}

// Gateways is the set over a bound client.
func Gateways(cfg Config, client Client, transferReference func(string) string) gateway.Set {
	p := Payouts{Client: client, TransferReference: transferReference}
	return gateway.Set{Payouts: p, Recipients: p, Accounts: p, Transfers: p, Events: Events{SecretKey: cfg.SecretKey}}
}
