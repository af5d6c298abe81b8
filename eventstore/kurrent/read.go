// Reading streams and the global log.

package kurrent

import (
	"context"
	"errors"
	"io"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"

	"github.com/escrowd/escrowd/eventstore"
)

func isNotFound(err error) bool {
	var kerr *kurrentdb.Error
	return errors.As(err, &kerr) && kerr.Code() == kurrentdb.ErrorCodeResourceNotFound
}

// drain reads a client read stream to its end.
func drain(rs *kurrentdb.ReadStream) ([]*kurrentdb.RecordedEvent, error) {
	defer rs.Close()
	var out []*kurrentdb.RecordedEvent
	for {
		ev, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if ev.Event != nil {
			out = append(out, ev.Event)
		}
	}
}

const readChunk = 1000

func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	return s.readStream(ctx, stream, from, limit, false)
}

// readStream is ReadStream, from the leader when leader is set: the
// adapter's reads of what it has just written (a node the client prefers
// for reads may not have it yet).
func (s *Store) readStream(ctx context.Context, stream string, from uint64, limit int, leader bool) ([]eventstore.RecordedEvent, error) {
	var out []eventstore.RecordedEvent
	for limit <= 0 || len(out) < limit {
		n := readChunk
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		rs, err := s.client.ReadStream(ctx, stream, kurrentdb.ReadStreamOptions{
			Direction:      kurrentdb.Forwards,
			From:           kurrentdb.Revision(from),
			RequiresLeader: leader,
		}, uint64(n))
		if err != nil {
			if isNotFound(err) {
				return out, nil
			}
			return nil, err
		}
		evs, err := drain(rs)
		if err != nil {
			if isNotFound(err) {
				return out, nil
			}
			return nil, err
		}
		for _, e := range evs {
			out = append(out, toRecorded(e))
		}
		if len(evs) < n {
			break
		}
		from = evs[len(evs)-1].EventNumber + 1
	}
	return out, nil
}

func allPosition(p eventstore.Position) kurrentdb.AllPosition {
	if p == eventstore.Start {
		return kurrentdb.Start{}
	}
	return kurrentdb.Position{Commit: p.Commit, Prepare: p.Prepare}
}

// ReadAll reads $all from after, skipping system events. A read from a
// position includes the event at it, so that one is skipped too.
func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []eventstore.RecordedEvent
	from := after
	for len(out) < limit {
		n := limit - len(out) + 1
		rs, err := s.client.ReadAll(ctx, kurrentdb.ReadAllOptions{Direction: kurrentdb.Forwards, From: allPosition(from)}, uint64(n))
		if err != nil {
			return nil, err
		}
		evs, err := drain(rs)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			pos := eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare}
			if !from.Less(pos) {
				continue
			}
			from = pos
			if isSystem(e) || len(out) == limit {
				continue
			}
			out = append(out, toRecorded(e))
		}
		if len(evs) < n {
			break
		}
	}
	return out, nil
}

// Last is Head: KurrentDB gives an event its place in $all when it
// commits, so nothing committed is held back from ReadAll, and the leader
// (which Head reads from) has every acknowledged append. A reader follows
// $all without system events, so the position to reach is that of the
// last non-system event, not the end of $all (a system event a reader
// never returns would keep it waiting forever).
func (s *Store) Last(ctx context.Context) (eventstore.Position, error) { return s.Head(ctx) }

// Every read after a write asks for it, so the first page is one event
// (the log's last is mostly the service's own); only a tail of system
// events makes it read on, in pages of 100.
func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	var from kurrentdb.AllPosition = kurrentdb.End{}
	for page := uint64(1); ; page = 100 {
		rs, err := s.client.ReadAll(ctx, kurrentdb.ReadAllOptions{Direction: kurrentdb.Backwards, From: from, RequiresLeader: true}, page)
		if err != nil {
			return eventstore.Position{}, err
		}
		evs, err := drain(rs)
		if err != nil {
			return eventstore.Position{}, err
		}
		for _, e := range evs {
			if !isSystem(e) {
				return eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare}, nil
			}
		}
		if uint64(len(evs)) < page {
			return eventstore.Start, nil
		}
		last := evs[len(evs)-1].Position
		if last.Commit == 0 && last.Prepare == 0 {
			return eventstore.Start, nil
		}
		// Whether a backwards read includes the event at its start or not,
		// that one is a system event already looked at: the next page
		// repeats one event at most.
		from = last
	}
}
