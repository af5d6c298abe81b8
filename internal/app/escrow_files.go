package app

import (
	"context"

	"github.com/escrowd/escrowd/domain/escrow"
)

// EscrowFiles are the uploaded files escrow id alone refers to, to remove
// once it is deleted: its images and dispute evidence. An escrow with units
// sold has none of its own: every sold unit is an escrow showing the same
// images.
func (s *Service) EscrowFiles(ctx context.Context, id string) ([]string, error) {
	stream := EscrowKind.StreamName(id)
	st, _, _, err := load(ctx, s.Engine, EscrowKind, stream, true)
	if err != nil || !st.Exists() || st.ParentID != "" {
		return nil, err // a sold unit shows its parent's images
	}
	const page = 500
	for from := uint64(0); ; from += page {
		evs, err := s.Engine.Store().ReadStream(ctx, stream, from, page)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if e.Type == (escrow.UnitSold{}).EventType() {
				return nil, nil
			}
		}
		if len(evs) < page {
			break
		}
	}
	out := append([]string{}, st.ImageURLs...)
	for _, d := range st.Disputes {
		if d.ProofURL != "" {
			out = append(out, d.ProofURL)
		}
	}
	return out, nil
}
