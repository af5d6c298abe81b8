// Package kurrent is the KurrentDB adapter of the event store port, on the
// official Go client (github.com/kurrent-io/KurrentDB-Client-Go).
//
// An append to one stream uses AppendToStream; an append to several streams
// uses MultiStreamAppend, KurrentDB's atomic multi-stream write (server
// 25.1 or later). The global log is $all without system events ($-prefixed
// streams or types); positions are KurrentDB's commit/prepare positions.
//
// Differences from the PostgreSQL adapter, all from the server:
//   - KurrentDB deduplicates an event id only within the stream it is
//     appended to; reusing an id in another stream is stored, not rejected
//     with ErrDuplicateEvent.
//   - MultiStreamAppend rejects a stream without events, so a revision check
//     without a write (zero events) works only as a single-stream append,
//     unless it is Observed: that one is a read of the stream before the
//     append, in any append.
//   - Multi-stream metadata must be a string map, so event metadata is
//     stored as one string property (metadataKey) and unwrapped on reading.
package kurrent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"

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
	client, err := kurrentdb.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("kurrent: %w", err)
	}
	return &Store{client: client, owned: true}, nil
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
	// Observed checks are reads made before the append, which is what
	// they promise (the stream was at Expected during the append); they
	// need no place in it, where a multi-stream append could not hold them.
	var observed map[string]uint64
	rest := appends[:0:0]
	for _, a := range appends {
		if !a.Observed || len(a.Events) > 0 {
			rest = append(rest, a)
			continue
		}
		rev, err := s.revisionOf(ctx, a.Stream)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		if a.Expected != eventstore.Any && rev != int64(a.Expected) {
			return eventstore.AppendResult{}, &eventstore.ConcurrencyError{Stream: a.Stream, Expected: a.Expected, Actual: rev}
		}
		if rev >= 0 {
			if observed == nil {
				observed = map[string]uint64{}
			}
			observed[a.Stream] = uint64(rev)
		}
	}
	var (
		res eventstore.AppendResult
		err error
	)
	switch len(rest) {
	case 0:
		res = eventstore.AppendResult{Revisions: map[string]uint64{}}
	case 1:
		res, err = s.appendOne(ctx, rest[0])
	default:
		res, err = s.appendMany(ctx, rest)
	}
	if err != nil {
		return res, err
	}
	for st, rev := range observed {
		res.Revisions[st] = rev
	}
	return res, nil
}

// revisionOf is a stream's last revision, -1 when it has no events.
func (s *Store) revisionOf(ctx context.Context, stream string) (int64, error) {
	rs, err := s.client.ReadStream(ctx, stream, kurrentdb.ReadStreamOptions{
		Direction: kurrentdb.Backwards,
		From:      kurrentdb.End{},
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

func (s *Store) appendOne(ctx context.Context, a eventstore.StreamAppend) (eventstore.AppendResult, error) {
	evs, err := toEventData(a.Events)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	wr, err := s.client.AppendToStream(ctx, a.Stream, kurrentdb.AppendToStreamOptions{StreamState: streamState(a.Expected)}, evs...)
	if err != nil {
		return eventstore.AppendResult{}, mapAppendError(err, []eventstore.StreamAppend{a})
	}
	res := eventstore.AppendResult{Revisions: map[string]uint64{}}
	if len(a.Events) == 0 {
		// A pure revision check: nothing to wait for, and the revision is
		// the expected one (the client's result is not meaningful here).
		if a.Expected >= 0 {
			res.Revisions[a.Stream] = uint64(a.Expected)
		}
		return res, nil
	}
	res.Revisions[a.Stream] = wr.NextExpectedVersion
	res.Position, err = s.positionOf(ctx, a.Stream, wr.NextExpectedVersion)
	return res, err
}

func (s *Store) appendMany(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, error) {
	reqs := make([]kurrentdb.AppendStreamRequest, len(appends))
	for i, a := range appends {
		if len(a.Events) == 0 {
			return eventstore.AppendResult{}, fmt.Errorf("kurrent: stream %q has no events: a multi-stream append cannot check a revision without writing: %w", a.Stream, errors.ErrUnsupported)
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
	res := eventstore.AppendResult{Revisions: make(map[string]uint64, len(appends))}
	for _, r := range resp.Responses {
		if r.StreamRevision >= 0 {
			res.Revisions[r.Stream] = uint64(r.StreamRevision)
		}
	}
	// The response carries one log position, not the commit/prepare pair
	// ReadAll reports; read back each stream's last event and take the
	// latest so that callers can wait for exactly that position.
	for _, a := range appends {
		rev, ok := res.Revisions[a.Stream]
		if !ok {
			return eventstore.AppendResult{}, fmt.Errorf("kurrent: multi-stream append reported no revision for %q", a.Stream)
		}
		pos, err := s.positionOf(ctx, a.Stream, rev)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		if res.Position.Less(pos) {
			res.Position = pos
		}
	}
	return res, nil
}

// positionOf reads the global position of one event of a stream.
func (s *Store) positionOf(ctx context.Context, stream string, rev uint64) (eventstore.Position, error) {
	evs, err := s.ReadStream(ctx, stream, rev, 1)
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
	var out []eventstore.RecordedEvent
	for limit <= 0 || len(out) < limit {
		n := readChunk
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		rs, err := s.client.ReadStream(ctx, stream, kurrentdb.ReadStreamOptions{
			Direction: kurrentdb.Forwards,
			From:      kurrentdb.Revision(from),
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

// Head is the position of the last non-system event in $all.
// Last is Head: KurrentDB orders events at commit, so every committed
// event can be read at once.
func (s *Store) Last(ctx context.Context) (eventstore.Position, error) { return s.Head(ctx) }

func (s *Store) Head(ctx context.Context) (eventstore.Position, error) {
	var from kurrentdb.AllPosition = kurrentdb.End{}
	for {
		rs, err := s.client.ReadAll(ctx, kurrentdb.ReadAllOptions{Direction: kurrentdb.Backwards, From: from}, 100)
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
		if len(evs) < 100 {
			return eventstore.Start, nil
		}
		last := evs[len(evs)-1].Position
		if last.Commit == 0 && last.Prepare == 0 {
			return eventstore.Start, nil
		}
		// Backwards reads include the starting event; it is a system event
		// already looked at, so the next page repeats one event at most.
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

func (s *Store) follow(ctx context.Context, sub *kurrentdb.Subscription, pos *eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
	defer stop()
	for {
		ev := sub.Recv()
		switch {
		case ev.SubscriptionDropped != nil:
			if ev.SubscriptionDropped.Error == nil {
				return errors.New("kurrent: subscription dropped")
			}
			return ev.SubscriptionDropped.Error
		case ev.EventAppeared != nil && ev.EventAppeared.Event != nil:
			e := ev.EventAppeared.Event
			p := eventstore.Position{Commit: e.Position.Commit, Prepare: e.Position.Prepare}
			if !pos.Less(p) || isSystem(e) {
				continue
			}
			if err := handle(ctx, []eventstore.RecordedEvent{toRecorded(e)}); err != nil {
				return handlerError{err}
			}
			*pos = p
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
