package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
)

// Snapshots make a cold load flat in the stream's length: the engine
// stores a stream's folded state (eventstore.SnapshotStore) every
// Engine.SnapshotEvery events, and a load that misses the cache starts
// from the newest snapshot, reading only the events after it. A snapshot
// is used only when all of this holds, and ignored otherwise (the stream
// is then replayed from its first event, as without snapshots):
//
//   - its format is the kind's Snapshot format (a change of the state's
//     shape or of Apply gets a new format, so old snapshots are ignored);
//   - its digest matches (stream, revision, event id, format, state);
//   - the stream's event at its revision is the event it names.
//
// The revision a command expects when it appends stays the stream's true
// revision: the load reads the events after the snapshot up to the end of
// the stream, as it does after a cached state.

// defaultSnapshotEvery is Engine.SnapshotEvery unless set.
const defaultSnapshotEvery = 100

// snapshotEnvelope is the stored form of a snapshot.
type snapshotEnvelope struct {
	Format  string          `json:"format"`
	EventID uuid.UUID       `json:"eventId"` // the event at the snapshot's revision
	Digest  string          `json:"digest"`
	State   json.RawMessage `json:"state"`
}

func snapshotDigest(stream string, rev uint64, id uuid.UUID, format string, state []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(stream), []byte(strconv.FormatUint(rev, 10)), id[:], []byte(format), state} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{0})
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// encodeSnapshot is the snapshot of st, stream's state up to the event id
// at revision rev.
func encodeSnapshot[S any](k Kind[S], stream string, rev uint64, id uuid.UUID, st S) (eventstore.Snapshot, error) {
	state, err := json.Marshal(st)
	if err != nil {
		return eventstore.Snapshot{}, err
	}
	data, err := json.Marshal(snapshotEnvelope{Format: k.Snapshot, EventID: id,
		Digest: snapshotDigest(stream, rev, id, k.Snapshot, state), State: state})
	return eventstore.Snapshot{Stream: stream, Revision: rev, Data: data}, err
}

// decodeSnapshot checks a stored snapshot (format and digest; the event id
// is for the caller to check against the stream) and decodes its state.
func decodeSnapshot[S any](k Kind[S], snap eventstore.Snapshot) (st S, id uuid.UUID, ok bool) {
	var env snapshotEnvelope
	if k.Snapshot == "" || json.Unmarshal(snap.Data, &env) != nil || env.Format != k.Snapshot ||
		env.Digest != snapshotDigest(snap.Stream, snap.Revision, env.EventID, env.Format, env.State) {
		return st, id, false
	}
	if domain.Unmarshal(env.State, &st) != nil {
		var zero S
		return zero, id, false
	}
	return st, env.EventID, true
}

// readSnapshot returns the stream's usable snapshot, if any (its event
// still to be checked): a failed read only means no snapshot.
func readSnapshot[S any](ctx context.Context, e *Engine, k Kind[S], stream string) (st S, rev uint64, id uuid.UUID, ok bool) {
	ss, can := e.store.(eventstore.SnapshotStore)
	if !can || k.Snapshot == "" {
		return st, 0, id, false
	}
	snap, found, err := ss.ReadSnapshot(ctx, stream)
	if err != nil || !found {
		return st, 0, id, false
	}
	st, id, ok = decodeSnapshot(k, snap)
	return st, snap.Revision, id, ok
}

// snapshotDue reports whether folding a stream from revision since (-1:
// from nothing) to revision rev passed a multiple of the engine's
// snapshot interval.
func (e *Engine) snapshotDue(since, rev int64) bool {
	every := int64(e.SnapshotEvery)
	return every > 0 && rev > since && (rev+1)/every > (since+1)/every
}

// writeSnapshot stores st as stream's snapshot at rev (the event id)
// without making the caller wait: at most a few writes run at once, and
// one that finds them all busy is skipped (a later one will do). A
// failure only leaves the previous snapshot in place.
func writeSnapshot[S any](e *Engine, k Kind[S], stream string, rev uint64, id uuid.UUID, st S) {
	ss, can := e.store.(eventstore.SnapshotStore)
	if !can || k.Snapshot == "" {
		return
	}
	select {
	case e.snapshotSlots <- struct{}{}:
	default:
		return
	}
	go func() {
		defer func() { <-e.snapshotSlots }()
		snap, err := encodeSnapshot(k, stream, rev, id, st)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ss.WriteSnapshot(ctx, snap)
	}()
}
