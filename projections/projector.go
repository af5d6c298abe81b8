// Package projections builds PostgreSQL read models from the global event
// log. Each projector is idempotent over its checkpoint: the runner applies a
// batch of events and moves the checkpoint in one transaction.
package projections

import (
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// The contract between the runner and what it drives lives in package
// projector, so that consumers outside projections (the webhook
// subscriber) implement it without importing the read models. These names
// are the same types, not copies.
type (
	Projector      = projector.Projector
	Planner        = projector.Planner
	Querier        = projector.Querier
	CommitObserver = projector.CommitObserver
	Interested     = projector.Interested
)

// concerns reports whether any event of the batch is for p.
func concerns(p Projector, events []eventstore.RecordedEvent) bool {
	in, ok := p.(Interested)
	if !ok {
		return true
	}
	prefixes := in.StreamPrefixes()
	for _, re := range events {
		for _, pre := range prefixes {
			if strings.HasPrefix(re.Stream, pre) {
				return true
			}
		}
	}
	return false
}

// The projectors' names, which reads name to wait only for the read models
// they query (Runner.WaitFor). Names are stored checkpoints: never rename
// one.
const (
	MerchantsName  = "merchants"
	CustomersName  = "customers"
	WhitelistName  = "whitelist"
	LedgerName     = "ledger"
	CategoriesName = "categories"
	EscrowsName    = "escrows"
	AuditTrailName = "audit_trail"
)

// All lists every read model the service builds: add new projectors here.
func All(sealer domain.Sealer) []Projector {
	return []Projector{Merchants{}, Customers{Sealer: sealer}, Whitelist{Sealer: sealer}, Ledger{Sealer: sealer}, Categories{}, Escrows{states: newEscrowStates(), Sealer: sealer}, AuditTrail{}, Deadlines{}}
}
