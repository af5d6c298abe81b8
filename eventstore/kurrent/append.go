// Appending to KurrentDB: one stream per call, several streams in a
// session, and the mapping of its revision errors.

package kurrent

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"

	"github.com/escrowd/escrowd/eventstore"
)

func (s *Store) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if len(appends) == 0 {
		return eventstore.AppendResult{}, errors.New("eventstore: empty append")
	}
	seen := make(map[string]bool, len(appends))
	for _, a := range appends {
		if a.Stream == "" {
			return eventstore.AppendResult{}, errors.New("eventstore: empty stream name")
		}
		if seen[a.Stream] {
			return eventstore.AppendResult{}, fmt.Errorf("eventstore: stream %q appears twice in one append", a.Stream)
		}
		seen[a.Stream] = true
		for _, e := range a.Events {
			if e.Type == "" {
				return eventstore.AppendResult{}, errors.New("eventstore: event without type")
			}
		}
	}
	var written, checked int
	for _, a := range appends {
		if len(a.Events) > 0 {
			written++
		} else {
			checked++
		}
	}
	switch {
	case written == 0:
		return s.checkOnly(ctx, appends)
	case written == 1 && checked == 0:
		return s.appendOne(ctx, appends[0])
	default:
		// The log holds one append's events stream by stream in name order
		// (eventstore.Store), as the PostgreSQL adapter writes them; the
		// server keeps the order of the records it is given.
		sorted := slices.Clone(appends)
		slices.SortFunc(sorted, func(a, b eventstore.StreamAppend) int { return strings.Compare(a.Stream, b.Stream) })
		return s.appendRecords(ctx, sorted)
	}
}

// checkOnly serves an append that writes nothing: each stream's revision
// is read from the leader and compared. Nothing commits, so what a check
// promises (the stream is at Expected during the append) is what its read
// shows; several streams are each seen at their own moment, which is all
// a decision to write nothing can rest on.
func (s *Store) checkOnly(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, error) {
	res := eventstore.AppendResult{Revisions: map[string]uint64{}}
	for _, a := range appends {
		rev, err := s.revisionOf(ctx, a.Stream)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		if !holds(a.Expected, rev) {
			return eventstore.AppendResult{}, &eventstore.ConcurrencyError{Stream: a.Stream, Expected: a.Expected, Actual: rev}
		}
		if rev >= 0 {
			res.Revisions[a.Stream] = uint64(rev)
		}
	}
	return res, nil
}

func holds(e eventstore.ExpectedRevision, rev int64) bool {
	return e == eventstore.Any || int64(e) == rev
}

// revisionOf is a stream's last revision, -1 when it has no events.
func (s *Store) revisionOf(ctx context.Context, stream string) (int64, error) {
	rs, err := s.client.ReadStream(ctx, stream, kurrentdb.ReadStreamOptions{
		Direction:      kurrentdb.Backwards,
		From:           kurrentdb.End{},
		RequiresLeader: true,
	}, 1)
	if err != nil {
		if isNotFound(err) {
			return -1, nil
		}
		return 0, err
	}
	evs, err := drain(rs)
	if err != nil {
		if isNotFound(err) {
			return -1, nil
		}
		return 0, err
	}
	if len(evs) == 0 {
		return -1, nil
	}
	return int64(evs[0].EventNumber), nil
}

// appendOne writes one stream with the v1 append, whose expected revision
// KurrentDB checks and whose repeat (same event ids at the same place) it
// answers as the original.
func (s *Store) appendOne(ctx context.Context, a eventstore.StreamAppend) (eventstore.AppendResult, error) {
	evs, err := toEventData(a.Events)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	wr, err := s.client.AppendToStream(ctx, a.Stream, kurrentdb.AppendToStreamOptions{StreamState: streamState(a.Expected)}, evs...)
	if err != nil {
		return eventstore.AppendResult{}, mapAppendError(err, []eventstore.StreamAppend{a})
	}
	res := eventstore.AppendResult{Revisions: map[string]uint64{a.Stream: wr.NextExpectedVersion}}
	res.Position, err = s.positionOf(ctx, a.Stream, wr.NextExpectedVersion)
	return res, err
}

// appendRecords writes several streams, or one beside revision checks on
// others, in one AppendRecords call: KurrentDB's atomic multi-stream
// append, whose consistency checks may name streams it does not write.
// Every stream with an expected revision becomes a check, so the server
// commits the records only while every stream the decision read is still
// at the revision it was read at, written or not: a Guard and an Observed
// check are both that (a check at commit is a lock held until the commit,
// and proves the observation too).
//
// A server without AppendRecords (before it, KurrentDB 25.1 offered only
// the AppendSession the client calls MultiStreamAppend) still takes
// appends that write every stream they name; a revision check without a
// write is refused there with errors.ErrUnsupported.
func (s *Store) appendRecords(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, error) {
	var (
		records []kurrentdb.AppendRecord
		checks  []kurrentdb.ConsistencyCheck
	)
	for _, a := range appends {
		if a.Expected != eventstore.Any {
			checks = append(checks, kurrentdb.StreamStateCheck{Stream: a.Stream, ExpectedState: streamState(a.Expected)})
		}
		evs, err := toEventData(a.Events)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		for _, e := range evs {
			records = append(records, kurrentdb.AppendRecord{Stream: a.Stream, Record: e})
		}
	}
	resp, err := s.client.AppendRecords(ctx, records, checks...)
	if err != nil {
		if code(err) == kurrentdb.ErrorCodeUnsupportedFeature {
			return s.appendSession(ctx, appends)
		}
		if code(err) == kurrentdb.ErrorCodeAppendConsistencyViolation {
			// AppendRecords promises no idempotency: a repeat of an append
			// that did commit (its answer lost) fails its own checks. The
			// events found where the append put them make it the success
			// it was.
			if res, ok, rerr := s.repeated(ctx, appends); rerr != nil || ok {
				return res, rerr
			}
		}
		return eventstore.AppendResult{}, mapAppendError(err, appends)
	}
	return s.finish(ctx, appends, resp.Responses)
}

// finish completes the result of a multi-stream append: the revisions of
// the streams only checked (they held at the commit), and the position of
// the last event written. The server keeps the records' order in the log,
// so that is the last event of the last stream written; the response
// carries one log position, not the commit/prepare pair ReadAll reports,
// so it is read back.
func (s *Store) finish(ctx context.Context, appends []eventstore.StreamAppend, written []kurrentdb.AppendResponse) (eventstore.AppendResult, error) {
	res := eventstore.AppendResult{Revisions: make(map[string]uint64, len(appends))}
	for _, r := range written {
		if r.StreamRevision >= 0 {
			res.Revisions[r.Stream] = uint64(r.StreamRevision)
		}
	}
	var last string
	for _, a := range appends {
		if len(a.Events) > 0 {
			if _, ok := res.Revisions[a.Stream]; !ok {
				return eventstore.AppendResult{}, fmt.Errorf("kurrent: multi-stream append reported no revision for %q", a.Stream)
			}
			last = a.Stream
		} else if a.Expected >= 0 {
			res.Revisions[a.Stream] = uint64(a.Expected)
		}
	}
	pos, err := s.positionOf(ctx, last, res.Revisions[last])
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	res.Position = pos
	return res, nil
}

// repeated reports whether every stream the append writes already holds
// its events, by id, right after the expected revision: the append has
// committed before. A stream written with Any has no place to look at, so
// such an append is never taken for a repeat.
func (s *Store) repeated(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, bool, error) {
	var found []kurrentdb.AppendResponse
	for _, a := range appends {
		if len(a.Events) == 0 {
			continue
		}
		if a.Expected == eventstore.Any {
			return eventstore.AppendResult{}, false, nil
		}
		from := uint64(a.Expected + 1) // NoStream is -1
		got, err := s.readStream(ctx, a.Stream, from, len(a.Events), true)
		if err != nil {
			return eventstore.AppendResult{}, false, err
		}
		if len(got) != len(a.Events) {
			return eventstore.AppendResult{}, false, nil
		}
		for i, e := range a.Events {
			if got[i].ID != e.ID {
				return eventstore.AppendResult{}, false, nil
			}
		}
		found = append(found, kurrentdb.AppendResponse{Stream: a.Stream, StreamRevision: int64(got[len(got)-1].Revision)})
	}
	res, err := s.finish(ctx, appends, found)
	return res, err == nil, err
}

// appendSession is the multi-stream append of a server without
// AppendRecords: an AppendSession with each stream's expected revision.
func (s *Store) appendSession(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, error) {
	reqs := make([]kurrentdb.AppendStreamRequest, len(appends))
	for i, a := range appends {
		if len(a.Events) == 0 {
			return eventstore.AppendResult{}, fmt.Errorf("kurrent: stream %q has no events: the server has no AppendRecords, and its AppendSession cannot check a revision without writing: %w", a.Stream, errors.ErrUnsupported)
		}
		evs, err := toEventData(a.Events)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		reqs[i] = kurrentdb.AppendStreamRequest{
			StreamName:          a.Stream,
			Events:              slices.Values(evs),
			ExpectedStreamState: streamState(a.Expected),
		}
	}
	resp, err := s.client.MultiStreamAppend(ctx, slices.Values(reqs))
	if err != nil {
		return eventstore.AppendResult{}, mapAppendError(err, appends)
	}
	return s.finish(ctx, appends, resp.Responses)
}

func code(err error) kurrentdb.ErrorCode {
	var kerr *kurrentdb.Error
	if errors.As(err, &kerr) {
		return kerr.Code()
	}
	return kurrentdb.ErrorCodeUnknown
}

// positionOf reads the global position of one event of a stream.
func (s *Store) positionOf(ctx context.Context, stream string, rev uint64) (eventstore.Position, error) {
	evs, err := s.readStream(ctx, stream, rev, 1, true)
	if err != nil {
		return eventstore.Position{}, err
	}
	if len(evs) != 1 {
		return eventstore.Position{}, fmt.Errorf("kurrent: appended event %s@%d cannot be read back", stream, rev)
	}
	return evs[0].Position, nil
}

func streamState(e eventstore.ExpectedRevision) kurrentdb.StreamState {
	switch {
	case e == eventstore.Any:
		return kurrentdb.Any{}
	case e == eventstore.NoStream:
		return kurrentdb.NoStream{}
	default:
		return kurrentdb.StreamRevision{Value: uint64(e)}
	}
}

// mapAppendError turns the server's wrong-expected-revision answers into
// *eventstore.ConcurrencyError; every other error propagates.
func mapAppendError(err error, appends []eventstore.StreamAppend) error {
	var kerr *kurrentdb.Error
	if !errors.As(err, &kerr) {
		return err
	}
	expectedOf := func(stream string) eventstore.ExpectedRevision {
		for _, a := range appends {
			if a.Stream == stream {
				return a.Expected
			}
		}
		return eventstore.Any
	}
	switch kerr.Code() {
	case kurrentdb.ErrorCodeStreamRevisionConflict:
		var conflict *kurrentdb.StreamRevisionConflictError
		if errors.As(kerr.Err(), &conflict) {
			return &eventstore.ConcurrencyError{Stream: conflict.Stream, Expected: expectedOf(conflict.Stream), Actual: actualRevision(conflict.ActualRevision)}
		}
		if len(appends) == 1 {
			return &eventstore.ConcurrencyError{Stream: appends[0].Stream, Expected: appends[0].Expected, Actual: -1}
		}
		return fmt.Errorf("%w: %v", eventstore.ErrConcurrency, err)
	case kurrentdb.ErrorCodeAppendConsistencyViolation:
		var violation *kurrentdb.AppendConsistencyViolationError
		if errors.As(kerr.Err(), &violation) && len(violation.Violations) > 0 {
			v := violation.Violations[0]
			return &eventstore.ConcurrencyError{Stream: v.Stream, Expected: expectedOf(v.Stream), Actual: actualRevision(v.ActualState)}
		}
		return fmt.Errorf("%w: %v", eventstore.ErrConcurrency, err)
	case kurrentdb.ErrorCodeWrongExpectedVersion:
		// Only the single-stream append answers this way, and only with text.
		if len(appends) != 1 {
			return fmt.Errorf("%w: %v", eventstore.ErrConcurrency, err)
		}
		return &eventstore.ConcurrencyError{Stream: appends[0].Stream, Expected: appends[0].Expected, Actual: actualFromMessage(kerr.Error())}
	}
	return err
}

func actualRevision(s kurrentdb.StreamState) int64 {
	switch v := s.(type) {
	case kurrentdb.StreamRevision:
		return int64(v.Value)
	default:
		return -1
	}
}

var gotRevision = regexp.MustCompile(`but got '([^']*)'`)

// actualFromMessage reads the current revision from the client's
// "wrong expected version: expecting 'x' but got 'y'" text; -1 when the
// stream does not exist or the text has no number.
func actualFromMessage(msg string) int64 {
	m := gotRevision.FindStringSubmatch(msg)
	if m == nil {
		return -1
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}
