package main

import (
	"context"
	"fmt"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
)

// openKurrent opens the KurrentDB adapter (ESCROW_EVENT_STORE=kurrent) and
// checks that the server takes every append the commands make: a server
// that would refuse guarded commands (payouts, crypto withdrawals) is
// refused at start, not at the first payout.
func openKurrent(ctx context.Context, cfg Config) (eventstore.Store, error) {
	if cfg.KurrentURL == "" {
		return nil, fmt.Errorf("ESCROW_EVENT_STORE=kurrent needs KURRENTDB_URL")
	}
	s, err := kurrent.Open(cfg.KurrentURL)
	if err != nil {
		return nil, err
	}
	if err := s.CheckServer(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
