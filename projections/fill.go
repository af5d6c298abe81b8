// Filling: how a rebuild writes the read models whose rows many events
// fold into.

package projections

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/hold"
)

// A Filler is a projector whose rebuild folds the log in memory instead of
// applying it batch by batch. Applying upserts a row once for every batch
// that touches it, reads it back and moves its listing counts each time;
// a fill writes each row once, when it has not been touched for a while
// (COPY for a new row), and counts the listings once over the filled
// tables. Its rows and counts must be those Apply gives (the rebuild
// tests compare them); Apply still writes what the log gains while the
// rebuild swaps the tables in.
type Filler interface {
	Projector
	NewFill() Fill
}

// Fill is one rebuild's fold of the log for a Filler. Take and Finish
// run in transactions on the shadow schema (unqualified names resolve to
// the shadow tables), which a fill writes in any order it likes: nothing
// reads them before the swap. The shadow has only the indexes behind
// constraints while it is filled (the rest are built after Finish).
type Fill interface {
	// Take folds the next events of the log that concern the projector.
	Take(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error
	// Finish writes everything still held and what is derived from
	// whole tables (the listings' counts).
	Finish(ctx context.Context, tx pgx.Tx) error
}

// fillHold is how many rows a fill holds before writing those not touched
// since it last wrote: most rows (an escrow, a transaction record) take
// all their events within a short stretch of the log, so a row is
// written once, and the memory of a fill does not grow with the history.
// A row met again after it was written is read back (or updated in
// place) at the cost of one more write. A variable for the tests.
var fillHold = 8192

// finishSeq sets the sequence of table's seq column past every row the
// fill wrote (rows, which numbers them by hold.Row.Seq), so that the rows
// applied after the fill follow them. The listings' tables number their
// rows in the order they were first written (a bigserial), which for a
// fill is the order they were first met, whenever they are written.
func finishSeq[R any](ctx context.Context, tx pgx.Tx, table string, rows *hold.Rows[R]) error {
	_, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence($1, 'seq'), $2, false)`, table, rows.NextSeq())
	return err
}

// continued lists the ids (the stream names without prefix) of the
// streams of prefix that events continue from an earlier page: the
// stream's first event in events is not its first. A fill holds such a
// row, or reads it back from what it wrote.
func continued(events []eventstore.RecordedEvent, prefix string) []string {
	var ids []string
	begun := map[string]bool{}
	for _, re := range events {
		id, ok := strings.CutPrefix(re.Stream, prefix)
		switch {
		case !ok:
		case re.Revision == 0:
			begun[id] = true
		case !begun[id]:
			ids = append(ids, id)
		}
	}
	return ids
}

// tenant is a merchant environment: listings number their rows per
// tenant.
type tenant struct{ merchant, env string }

// positions hands out the positions of one order of a listing, per
// tenant, from 1.
type positions map[tenant]int64

func (p positions) next(t tenant) int64 {
	p[t]++
	return p[t]
}

// copyRows writes rows into table's columns with COPY.
func copyRows(ctx context.Context, tx pgx.Tx, table string, columns []string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, columns, pgx.CopyFromRows(rows))
	return err
}
