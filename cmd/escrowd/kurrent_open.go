package main

import (
	"fmt"

	"github.com/escrowd/escrowd/eventstore"
)

func openKurrent(cfg Config) (eventstore.Store, error) {
	return nil, fmt.Errorf("ESCROW_EVENT_STORE=kurrent: adapter wiring pending")
}
