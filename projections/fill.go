// Filling: how a rebuild writes the read models whose rows many events
// fold into.

package projections

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/eventstore"
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

// held is the rows of one table a fill has folded and not yet written,
// by id.
type held[R any] struct {
	rows map[string]*heldRow[R]
	// gen counts the writes; a row touched since the last one has seen
	// == gen.
	gen  int64
	born int64
}

// heldRow is a row being folded.
type heldRow[R any] struct {
	id string
	v  R
	// stored: the shadow table has a row for it (written, then met
	// again): it is updated, not inserted.
	stored bool
	seen   int64
	born   int64 // the order rows were first met in: new rows are written in it
}

func newHeld[R any]() held[R] { return held[R]{rows: map[string]*heldRow[R]{}} }

// get is the row id when held, touched.
func (h *held[R]) get(id string) *heldRow[R] {
	r := h.rows[id]
	if r != nil {
		r.seen = h.gen
	}
	return r
}

// add holds a row met for the first time since it was last written.
func (h *held[R]) add(id string, v R, stored bool) *heldRow[R] {
	r := &heldRow[R]{id: id, v: v, stored: stored, seen: h.gen, born: h.born}
	h.born++
	h.rows[id] = r
	return r
}

// due takes out of the hold the rows to write now: all of them when all
// (or when fillHold is 0, which the tests use to write every row after
// each Take), else, once the hold is full, those not touched since the
// last write. New rows come in the order they were first met (for a
// listing's table, the order of their positions), stored ones in any
// order.
func (h *held[R]) due(all bool) (fresh, stored []*heldRow[R]) {
	all = all || fillHold == 0
	if !all && len(h.rows) < fillHold {
		return nil, nil
	}
	for id, r := range h.rows {
		if !all && r.seen == h.gen {
			continue
		}
		delete(h.rows, id)
		if r.stored {
			stored = append(stored, r)
		} else {
			fresh = append(fresh, r)
		}
	}
	h.gen++
	slices.SortFunc(fresh, func(a, b *heldRow[R]) int { return int(a.born - b.born) })
	return fresh, stored
}

// missing lists the ids of ids that are not held, each once, in order.
func (h *held[R]) missing(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if _, ok := h.rows[id]; !ok && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// seq is the row's seq: the listings' tables number their rows in the
// order they were first written (a bigserial), which for a fill is the
// order they were first met, whenever they are written; finishSeq moves
// the sequence past them.
func (r *heldRow[R]) seq() int64 { return r.born + 1 }

// finishSeq sets the sequence of table's seq column past every row the
// fill wrote, so that the rows applied after the fill follow them.
func (h *held[R]) finishSeq(ctx context.Context, tx pgx.Tx, table string) error {
	_, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence($1, 'seq'), $2, false)`, table, h.born+1)
	return err
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
