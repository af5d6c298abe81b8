// Package hold keeps the rows a long fold (a rebuild's fill, an audit's
// replay) is still changing, so that each row is written about once,
// when it has stopped changing, and memory stays bounded whatever the
// length of the history: a row met again after it was written is held
// again (read back by the caller, or updated in place).
package hold

import (
	"cmp"
	"slices"
)

// Rows is the rows of one table a fold holds, by id.
type Rows[R any] struct {
	// limit is how many rows are held before those not touched since the
	// last write are written; 0 writes every row at each Due.
	limit int
	rows  map[string]*Row[R]
	// gen counts the writes: a row touched since the last one has seen
	// == gen.
	gen  int64
	born int64
}

// Row is a row being folded.
type Row[R any] struct {
	ID string
	V  R
	// Stored: the table has a row for it (it was written, then met
	// again), to be updated rather than inserted.
	Stored bool
	seen   int64
	born   int64
}

// New holds up to limit rows (0: none past a Due).
func New[R any](limit int) *Rows[R] { return &Rows[R]{limit: limit, rows: map[string]*Row[R]{}} }

// Get is the row id when held, touched.
func (h *Rows[R]) Get(id string) *Row[R] {
	r := h.rows[id]
	if r != nil {
		r.seen = h.gen
	}
	return r
}

// Add holds a row met for the first time, or again after it was written
// (stored).
func (h *Rows[R]) Add(id string, v R, stored bool) *Row[R] {
	r := &Row[R]{ID: id, V: v, Stored: stored, seen: h.gen, born: h.born}
	h.born++
	h.rows[id] = r
	return r
}

// Len is the number of rows held.
func (h *Rows[R]) Len() int { return len(h.rows) }

// Missing lists the ids of ids that are not held, each once, in order.
func (h *Rows[R]) Missing(ids []string) []string {
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

// Due takes out of the hold the rows to write now: every row when all
// (or when the limit is 0), else, once the hold is full, those not
// touched since the last write. New rows come in the order they were
// first met, stored ones in any order.
func (h *Rows[R]) Due(all bool) (fresh, stored []*Row[R]) {
	all = all || h.limit == 0
	if !all && len(h.rows) < h.limit {
		return nil, nil
	}
	for id, r := range h.rows {
		if !all && r.seen == h.gen {
			continue
		}
		delete(h.rows, id)
		if r.Stored {
			stored = append(stored, r)
		} else {
			fresh = append(fresh, r)
		}
	}
	h.gen++
	slices.SortFunc(fresh, func(a, b *Row[R]) int { return cmp.Compare(a.born, b.born) })
	return fresh, stored
}

// Seq numbers the rows in the order they were first met, from 1: a
// fresh row written at any time takes its place in that order.
func (r *Row[R]) Seq() int64 { return r.born + 1 }

// NextSeq is above the Seq of every row held so far.
func (h *Rows[R]) NextSeq() int64 { return h.born + 1 }
