package hold

import (
	"slices"
	"testing"
)

func ids[R any](rows []*Row[R]) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// Each case: rows added (stored when the id starts with "s"), touched,
// then what Due gives.
func TestDue(t *testing.T) {
	for _, c := range []struct {
		name          string
		limit         int
		before        []string // added, then one Due(false) (the last write)
		then          []string // added, or touched when held
		all           bool
		fresh, stored []string
		left          int
	}{
		{name: "not full: nothing", limit: 4, then: []string{"a", "b"}, left: 2},
		{name: "full: nothing untouched yet", limit: 2, then: []string{"a", "b"}, left: 2},
		{name: "full: the rows untouched since the last write", limit: 2, before: []string{"a", "b", "c"}, then: []string{"b", "d"},
			fresh: []string{"a", "c"}, left: 2},
		{name: "stored rows apart", limit: 2, before: []string{"a", "s1"}, then: []string{"c"}, fresh: []string{"a"}, stored: []string{"s1"}, left: 1},
		{name: "all: every row, in the order first met", limit: 9, then: []string{"c", "a", "s2", "b"}, all: true,
			fresh: []string{"c", "a", "b"}, stored: []string{"s2"}},
		{name: "limit 0: every row", limit: 0, then: []string{"b", "a"}, fresh: []string{"b", "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := New[int](c.limit)
			touch := func(ids []string) {
				for _, id := range ids {
					if h.Get(id) == nil {
						h.Add(id, 0, id[0] == 's')
					}
				}
			}
			touch(c.before)
			if len(c.before) > 0 {
				// The last write: the hold is full, but every row was
				// touched since the write before, so none goes yet.
				if fresh, stored := h.Due(false); len(fresh)+len(stored) != 0 {
					t.Fatalf("the last write took %v %v", ids(fresh), ids(stored))
				}
			}
			touch(c.then)
			fresh, stored := h.Due(c.all)
			slices.Sort(c.stored)
			got := ids(stored)
			slices.Sort(got)
			if !slices.Equal(ids(fresh), c.fresh) || !slices.Equal(got, c.stored) || h.Len() != c.left {
				t.Fatalf("due %v %v, %d left; want %v %v, %d left", ids(fresh), got, h.Len(), c.fresh, c.stored, c.left)
			}
		})
	}
}

func TestSeqFollowsFirstMeeting(t *testing.T) {
	h := New[int](0)
	a, b := h.Add("a", 0, false), h.Add("b", 0, false)
	if a.Seq() != 1 || b.Seq() != 2 || h.NextSeq() != 3 {
		t.Fatalf("seqs %d %d next %d", a.Seq(), b.Seq(), h.NextSeq())
	}
	if got := h.Missing([]string{"a", "c", "c", "d"}); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("missing %v", got)
	}
}
