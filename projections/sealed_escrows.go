package projections

import (
	"context"
	"fmt"
	"slices"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
)

// An escrow's dispute entries name the people who wrote them and say what
// they wrote: rm_escrows.state keeps each entry's name and message sealed
// with the merchant's data key, as the dispute's events seal them; the
// rest of the state stays plain JSON.

var disputePlaces = []string{"rm_escrows.state.disputes.name", "rm_escrows.state.disputes.message"}

// sealDisputes is s with its dispute entries from the from-th on sealed
// (plain without a sealer). Entries are only ever appended, and a state
// read from its row or written before has every entry sealed, so the
// caller passes the count of those it started from: an entry is sealed
// once, and a message that merely looks sealed is sealed like any other.
// The entries before from are shared with s, never changed.
func sealDisputes(ctx context.Context, sealer domain.Sealer, s escrow.State, from int) (escrow.State, error) {
	if sealer == nil || from >= len(s.Disputes) {
		return s, nil
	}
	s.Disputes = slices.Clone(s.Disputes)
	owner := domain.MerchantData(s.MerchantID)
	for i := from; i < len(s.Disputes); i++ {
		d := &s.Disputes[i]
		for j, f := range []*string{&d.Name, &d.Message} {
			sealed, err := sealFor(ctx, sealer, owner, disputePlaces[j], *f)
			if err != nil {
				return s, fmt.Errorf("projections: sealing %s of escrow %s: %w", disputePlaces[j], s.ID, err)
			}
			*f = sealed
		}
	}
	return s, nil
}

// openDisputes opens the dispute entries of a state read from its row.
func (q *Queries) openDisputes(ctx context.Context, s *escrow.State) error {
	for i := range s.Disputes {
		if err := q.openAll(ctx, disputePlaces, &s.Disputes[i].Name, &s.Disputes[i].Message); err != nil {
			return err
		}
	}
	return nil
}
