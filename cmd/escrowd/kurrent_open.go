package main

import (
	"fmt"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
)

// openKurrent opens the KurrentDB adapter (ESCROW_EVENT_STORE=kurrent).
func openKurrent(cfg Config) (eventstore.Store, error) {
	if cfg.KurrentURL == "" {
		return nil, fmt.Errorf("ESCROW_EVENT_STORE=kurrent needs KURRENTDB_URL")
	}
	return kurrent.Open(cfg.KurrentURL)
}
