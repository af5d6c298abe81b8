// Package kurrent is the KurrentDB adapter of the event store port, on the
// official Go client (github.com/kurrent-io/KurrentDB-Client-Go).
//
// An append that writes one stream and checks no other uses the v1
// AppendToStream; any other append that writes uses AppendRecords,
// KurrentDB's atomic multi-stream append, whose consistency checks name
// any stream, written or not: every stream with an expected revision is
// checked at the commit, which is what the port's revision checks without
// a write (guarded and observed streams) ask. On a server without
// AppendRecords (KurrentDB 25.1) the AppendSession (MultiStreamAppend)
// takes the appends that write every stream they name. An append that
// writes nothing reads the revisions it checks. The global log is $all
// without system events ($-prefixed streams or types); positions are
// KurrentDB's commit/prepare positions. Reads that decide (revisions,
// Head, Last) ask for the cluster's leader.
//
// Differences from the PostgreSQL adapter, all from the server:
//   - KurrentDB deduplicates an event id only within the stream it is
//     appended to; reusing an id in another stream is stored, not rejected
//     with ErrDuplicateEvent (storetest.Limits.EventIDsPerStream).
//   - Multi-stream metadata must be a string map, so event metadata is
//     stored as one string property (metadataKey) and unwrapped on reading.
package kurrent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/escrowd/escrowd/eventstore"
)

// metadataKey is the property that carries an event's metadata JSON.
const metadataKey = "escrowd-metadata"

// Store implements eventstore.Store on KurrentDB.
type Store struct {
	client *kurrentdb.Client
	owned  bool
}

// Open connects to the server named by a connection string, e.g.
// "kurrentdb://localhost:2113?tls=false". Close closes the client.
func Open(connectionString string) (*Store, error) {
	cfg, err := kurrentdb.ParseConnectionString(connectionString)
	if err != nil {
		return nil, fmt.Errorf("kurrent: %w", err)
	}
	cfg.Logger = clientLog
	client, err := kurrentdb.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("kurrent: %w", err)
	}
	return &Store{client: client, owned: true}, nil
}

// serverCheckStream is the stream CheckServer's append names; nothing is
// ever written to it.
const serverCheckStream = "escrowd-server-check"

// CheckServer reports whether the server takes every append the commands
// make, revision checks on streams they do not write included: it must
// offer AppendRecords. It asks with an append whose consistency check
// cannot hold (a revision no stream reaches), which writes nothing.
func (s *Store) CheckServer(ctx context.Context) error {
	data, _ := toEventData([]eventstore.EventData{{ID: uuid.New(), Type: "escrowd.server-check"}})
	_, err := s.client.AppendRecords(ctx, []kurrentdb.AppendRecord{{Stream: serverCheckStream, Record: data[0]}},
		kurrentdb.StreamStateCheck{Stream: serverCheckStream, ExpectedState: kurrentdb.StreamRevision{Value: math.MaxInt64}})
	switch code(err) {
	case kurrentdb.ErrorCodeAppendConsistencyViolation:
		return nil
	case kurrentdb.ErrorCodeUnsupportedFeature:
		return errors.New("kurrent: the server does not offer AppendRecords (multi-stream appends with consistency checks), " +
			"which guarded commands need (crypto withdrawals, payouts, category references): upgrade KurrentDB")
	}
	if err == nil {
		return errors.New("kurrent: the server accepted an append whose consistency check cannot hold")
	}
	return fmt.Errorf("kurrent: checking the server: %w", err)
}

// clientLog passes the client's warnings and errors to the standard logger,
// without its connection chatter (debug, info) and without the error it
// logs for every call or subscription ended by its own context, which is
// how the adapter stops them.
func clientLog(level kurrentdb.LogLevel, format string, args ...any) {
	if level == kurrentdb.LogDebug || level == kurrentdb.LogInfo {
		return
	}
	if len(args) == 1 { // Configuration.applyLogger passes its arguments as one slice
		if inner, ok := args[0].([]any); ok {
			args = inner
		}
	}
	for _, a := range args {
		if err, ok := a.(error); ok && status.Code(err) == codes.Canceled {
			return
		}
	}
	log.Printf("kurrentdb: ["+level+"] "+format, args...)
}

// New wraps a client that stays the caller's to close.
func New(client *kurrentdb.Client) *Store { return &Store{client: client} }

// Close closes the client if Open created it.
func (s *Store) Close() {
	if s.owned {
		_ = s.client.Close()
	}
}

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
		return s.appendRecords(ctx, appends)
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

func toEventData(in []eventstore.EventData) ([]kurrentdb.EventData, error) {
	out := make([]kurrentdb.EventData, len(in))
	for i, e := range in {
		meta, err := wrapMetadata(e.Metadata)
		if err != nil {
			return nil, err
		}
		data := e.Data
		if len(data) == 0 {
			data = []byte("null")
		}
		out[i] = kurrentdb.EventData{
			EventID:     e.ID,
			EventType:   e.Type,
			ContentType: kurrentdb.ContentTypeJson,
			Data:        data,
			Metadata:    meta,
		}
	}
	return out, nil
}

func wrapMetadata(meta []byte) ([]byte, error) {
	if meta == nil {
		return nil, nil
	}
	if !json.Valid(meta) {
		return nil, errors.New("eventstore: event metadata is not valid JSON")
	}
	return json.Marshal(map[string]string{metadataKey: string(meta)})
}

// unwrapMetadata returns the metadata an event was appended with. Events
// written by other clients keep their metadata as stored, unless it only
// holds the server's own ($-prefixed) properties.
func unwrapMetadata(stored []byte) []byte {
	if len(stored) == 0 {
		return nil
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal(stored, &props); err != nil {
		return stored
	}
	if raw, ok := props[metadataKey]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return []byte(s)
		}
	}
	for k := range props {
		if !strings.HasPrefix(k, "$") {
			return stored
		}
	}
	return nil
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

func isNotFound(err error) bool {
	var kerr *kurrentdb.Error
	return errors.As(err, &kerr) && kerr.Code() == kurrentdb.ErrorCodeResourceNotFound
}

func isSystem(e *kurrentdb.RecordedEvent) bool {
	return strings.HasPrefix(e.StreamID, "$") || strings.HasPrefix(e.EventType, "$")
}

func toRecorded(e *kurrentdb.RecordedEvent) eventstore.RecordedEvent {
	return eventstore.RecordedEvent{
		ID:         e.EventID,
		Stream:     e.StreamID,
		Revision:   e.EventNumber,
		Position:   eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare},
		Type:       e.EventType,
		Data:       e.Data,
		Metadata:   unwrapMetadata(e.UserMetadata),
		RecordedAt: e.CreatedDate,
	}
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

// Head is the position of the last non-system event in $all.

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

// Subscribe follows $all from after. A subscription the server drops is
// resumed from the last event handled; it ends only with ctx, with the
// handler's error, or with an error no retry can fix.
func (s *Store) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	pos := after
	backoff := 100 * time.Millisecond
	for {
		sub, err := s.client.SubscribeToAll(ctx, kurrentdb.SubscribeToAllOptions{
			From:   allPosition(pos),
			Filter: kurrentdb.ExcludeSystemEventsFilter(),
		})
		if err == nil {
			err = s.follow(ctx, sub, &pos, handle)
			_ = sub.Close()
			if errors.Is(err, errHandler) {
				return errors.Unwrap(err)
			}
			backoff = 100 * time.Millisecond
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errHandler marks an error of the handler, which Subscribe returns as is.
var errHandler = errors.New("handler failed")

type handlerError struct{ err error }

func (e handlerError) Error() string        { return e.err.Error() }
func (e handlerError) Is(target error) bool { return target == errHandler }
func (e handlerError) Unwrap() error        { return e.err }

// followBatch bounds the events follow hands over at once.
const followBatch = 500

// follow hands the subscription's events to handle in batches: each batch
// is what arrived while the previous one was handled (at most
// followBatch), so a busy log costs a reader (a projection's transaction)
// one call per batch rather than per event, while a quiet one still gets
// each event at once.
func (s *Store) follow(ctx context.Context, sub *kurrentdb.Subscription, pos *eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
	defer stop()
	done := make(chan struct{})
	defer close(done)
	arrived := make(chan *kurrentdb.SubscriptionEvent, followBatch)
	go func() {
		for {
			ev := sub.Recv()
			select {
			case arrived <- ev:
			case <-done:
				return
			}
			if ev.SubscriptionDropped != nil {
				return
			}
		}
	}()
	last := *pos
	var batch []eventstore.RecordedEvent
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := handle(ctx, batch); err != nil {
			return handlerError{err}
		}
		*pos = last
		batch = nil // the handler may keep the slice
		return nil
	}
	for {
		var ev *kurrentdb.SubscriptionEvent
		if len(batch) == 0 {
			ev = <-arrived
		} else if len(batch) < followBatch {
			select {
			case ev = <-arrived:
			default:
			}
		}
		if ev == nil {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		switch {
		case ev.SubscriptionDropped != nil:
			// What arrived before the drop is handed over first.
			if err := flush(); err != nil {
				return err
			}
			if ev.SubscriptionDropped.Error == nil {
				return errors.New("kurrent: subscription dropped")
			}
			return ev.SubscriptionDropped.Error
		case ev.EventAppeared != nil && ev.EventAppeared.Event != nil:
			e := ev.EventAppeared.Event
			p := eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare}
			if !last.Less(p) || isSystem(e) {
				continue
			}
			batch = append(batch, toRecorded(e))
			last = p
		}
	}
}

func permanent(err error) bool {
	var kerr *kurrentdb.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kurrentdb.ErrorCodeUnauthenticated, kurrentdb.ErrorCodeAccessDenied, kurrentdb.ErrorCodeUnsupportedFeature:
		return true
	}
	return false
}
