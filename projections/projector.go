// Package projections builds PostgreSQL read models from the global event
// log. Each projector is idempotent over its checkpoint: the runner applies a
// batch of events and moves the checkpoint in one transaction.
package projections

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
)

// Projector builds one read model.
type Projector interface {
	// Name is the stored checkpoint name: never rename one casually.
	Name() string
	// Schema is the DDL creating the projector's tables with unqualified
	// names and IF NOT EXISTS; a rebuild runs it in a shadow schema.
	Schema() string
	// Tables lists the tables Schema creates (moved into place on rebuild).
	Tables() []string
	// Apply writes the effect of events within tx. Table names must be
	// unqualified so that search_path selects live or shadow tables.
	Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error
}

// CommitObserver is implemented by a projector that acts once the batch it
// applied is committed (or is not): the runner calls Committed after every
// Apply of applyBatch, with whether its transaction committed. An ambiguous
// commit (an error from COMMIT: the server may have committed without the
// answer arriving) counts as not committed, so an observer must be safe
// when a batch it was told failed did commit.
type CommitObserver interface {
	Committed(ok bool)
}

// Interested is implemented by a projector that reads only the streams
// whose names start with one of its prefixes. A batch with none of them
// only moves its checkpoint, in one round trip instead of a transaction of
// several statements: most batches concern one or two read models.
type Interested interface {
	StreamPrefixes() []string
}

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

// All lists every read model the service builds. Names are stored
// checkpoints: add new projectors here, never rename one.
func All() []Projector {
	return []Projector{Merchants{}, Customers{}, Whitelist{}, Ledger{}, Categories{}, NewEscrows()}
}
