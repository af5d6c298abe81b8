package kurrent

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent/kurrenttest"
)

// TestHeadIsTheLeaders: connected with a preference for followers, to a
// cluster whose follower has not yet replicated the newest appends, Head
// and Last still reach every acknowledged append (they read from the
// leader), so a reader waiting for them waits for those appends and for
// nothing else; a read that does not decide (ReadAll) may answer from the
// follower without them, and the caller reads on until it reaches Last.
func TestHeadIsTheLeaders(t *testing.T) {
	srv, err := kurrenttest.Start(kurrenttest.Options{FollowerLag: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	s := openTestStore(t, srv.URL()+"&nodePreference=follower")
	ctx := context.Background()
	var last eventstore.Position
	for i := range 3 {
		res, err := s.Append(ctx, eventstore.StreamAppend{Stream: "lead-" + uuid.NewString()[:8], Expected: eventstore.NoStream,
			Events: []eventstore.EventData{{ID: uuid.New(), Type: "E", Data: []byte(`{}`)}}})
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		last = res.Position
	}
	head, err := s.Head(ctx)
	if err != nil || head != last {
		t.Fatalf("head %v (%v), want the last acknowledged append %v", head, err, last)
	}
	if l, err := s.Last(ctx); err != nil || l != last {
		t.Fatalf("last %v (%v), want %v", l, err, last)
	}
	evs, err := s.ReadAll(ctx, eventstore.Start, 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("ReadAll from a follower two records behind: %d events (%v), want 1", len(evs), err)
	}
}
