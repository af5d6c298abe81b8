package eventstore

import "context"

// Snapshot is a stream's state folded up to and including the event at
// Revision, encoded by whoever folds it (the store keeps the bytes).
type Snapshot struct {
	Stream   string
	Revision uint64
	Data     []byte
}

// SnapshotStore is implemented by stores that keep one snapshot per
// stream beside the log. A snapshot is never a source of truth: a reader
// checks it against the stream (the event at Revision exists) and may
// ignore it; losing one costs only a longer replay.
type SnapshotStore interface {
	// ReadSnapshot returns the stream's newest snapshot; ok is false when
	// it has none.
	ReadSnapshot(ctx context.Context, stream string) (s Snapshot, ok bool, err error)
	// WriteSnapshot stores s unless the stream has one at a later
	// revision.
	WriteSnapshot(ctx context.Context, s Snapshot) error
}
