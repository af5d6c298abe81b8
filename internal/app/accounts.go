// Resolving bank accounts' names at the provider, with answers kept a day.

package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/reference"
	"github.com/escrowd/escrowd/internal/gateway"
)

// Errors of account resolution.
var (
	ErrAccountUnresolved = domain.Invalidf("Could not resolve account name")
	ErrBankUnreachable   = &domain.Error{Code: domain.Unavailable, Resumable: true,
		Message: "The bank could not be reached to resolve the account; try again later"}
)

// accountNameTTL is how long a resolved name is kept; accountNamesMax
// bounds how many are (the oldest half goes when it is reached).
const (
	accountNameTTL  = 24 * time.Hour
	accountNamesMax = 50_000
)

// accountNames keeps resolved account names per environment and account.
type accountNames struct {
	mu    sync.Mutex
	names map[string]resolvedName
}

type resolvedName struct {
	name string
	at   time.Time
}

func (c *accountNames) get(key string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.names[key]
	if !ok || now.Sub(r.at) >= accountNameTTL {
		return "", false
	}
	return r.name, true
}

func (c *accountNames) put(key, name string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = map[string]resolvedName{}
	}
	if len(c.names) >= accountNamesMax {
		cut := now.Add(-accountNameTTL / 2)
		for k, r := range c.names {
			if r.at.Before(cut) || len(c.names) >= accountNamesMax {
				delete(c.names, k)
			}
		}
	}
	c.names[key] = resolvedName{name, now}
}

// ResolveAccount answers the name the bank holds an account under: asked
// of the environment's provider (answers kept a day), or, on the built-in
// test gateways (which resolve nothing), the invented test name of a valid
// NUBAN. ErrAccountUnresolved when the bank knows no such account;
// ErrPaymentsNotConfigured on a live environment without gateways.
func (s *Service) ResolveAccount(ctx context.Context, env domain.Environment, bankCode, accountNumber string) (string, error) {
	set := s.gateways(env)
	accounts := set.Accounts
	if accounts == nil {
		if env != domain.Test && set.Payouts == nil {
			return "", ErrPaymentsNotConfigured
		}
		if !reference.ValidNUBAN(bankCode, accountNumber) {
			return "", ErrAccountUnresolved
		}
		return reference.TestAccountName(bankCode, accountNumber), nil
	}
	if !reference.ValidNUBAN(bankCode, accountNumber) {
		return "", ErrAccountUnresolved
	}
	code := bankCode
	if b, ok := reference.FindBank(bankCode); ok {
		code = b.Code
	}
	key := string(env) + "/" + code + "/" + accountNumber
	now := s.Engine.Now()
	if name, ok := s.accountNames.get(key, now); ok {
		return name, nil
	}
	name, err := accounts.Resolve(ctx, bankCode, accountNumber)
	switch {
	case errors.Is(err, gateway.ErrAccountUnresolved):
		return "", ErrAccountUnresolved
	case err != nil:
		return "", errors.Join(ErrBankUnreachable, err)
	case name == "":
		return "", ErrAccountUnresolved
	}
	s.accountNames.put(key, name, now)
	return name, nil
}
