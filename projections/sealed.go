package projections

import (
	"context"
	"fmt"

	"github.com/escrowd/escrowd/domain"
)

// The read models keep personal values sealed with their owner's data key
// (the key their events are sealed with), each bound to its table and
// column: a backup of the tables holds none in plain text, and a
// forgotten customer's values read domain.Erased at once, with no
// rebuild. Nothing is filtered or sorted by a sealed column in SQL:
// lookups by email or phone go through the blind index of the
// customers' reservations.

// sealFor is plain sealed for owner where it is kept (plain as it is
// without a sealer: the projectors of a log that is not sealed).
func sealFor(ctx context.Context, s domain.Sealer, owner domain.DataOwner, where, plain string) (string, error) {
	if s == nil || plain == "" {
		return plain, nil
	}
	return s.Seal(ctx, owner, where, plain)
}

// open is a kept value as it was before sealing.
func (q *Queries) open(ctx context.Context, where, v string) (string, error) {
	if !domain.IsSealed(v) {
		return v, nil
	}
	if q.sealer == nil {
		return "", fmt.Errorf("projections: %s is sealed and these queries have no keys to open it", where)
	}
	return q.sealer.Open(ctx, where, v)
}

// openAll opens the values vs point to, kept at the places of where
// (pairwise).
func (q *Queries) openAll(ctx context.Context, where []string, vs ...*string) error {
	for i, v := range vs {
		if v == nil {
			continue
		}
		plain, err := q.open(ctx, where[i], *v)
		if err != nil {
			return err
		}
		*v = plain
	}
	return nil
}
