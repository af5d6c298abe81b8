// Package kurrenttest is an in-memory KurrentDB protocol server for tests:
// it speaks the gRPC protocol the official Go client
// (github.com/kurrent-io/KurrentDB-Client-Go) uses, written from the
// client's protocol definitions (protos/kurrentdb/protocols), so that the
// kurrent adapter and everything above it run in a plain `go test` where
// no KurrentDB server can be installed.
//
// It serves what escrowd's adapter calls, with the behaviour KurrentDB
// documents for it:
//   - server features (GetSupportedMethods), naming the v2 AppendSession
//     and AppendRecords methods so the client enables them;
//   - v1 Streams.Append: one stream, an expected revision (any, no stream,
//     stream exists, exact), answered with WrongExpectedVersion on a
//     mismatch; idempotent when the events (by id) are already stored at
//     the place the expectation names;
//   - v1 Streams.Read of a stream (forwards/backwards, from a revision, the
//     start or the end; StreamNotFound for a stream without events) and of
//     $all (from a position, inclusive forwards and exclusive backwards),
//     and $all subscriptions (from a position, exclusive; with the
//     client's event type or stream filters), which send a confirmation,
//     catch up, report CaughtUp and then follow new events;
//   - v2 StreamsService.AppendSession (one request per stream, all or
//     nothing, conflicts as STREAM_REVISION_CONFLICT with details) and
//     AppendRecords (records in any stream order, consistency checks on any
//     stream, written or not, violations reported all at once with
//     details; no idempotency is promised for it, so none is given).
//
// Positions are log positions as KurrentDB's: an event's prepare position
// is where its record starts in the log (records take room by their size,
// so positions are not consecutive), and its commit position is that of
// the first record of the write that stored it; $all is ordered by them.
// The log starts with system events ($-prefixed streams and types), as a
// real server's does, and WriteSystemEvent adds more: readers of $all must
// filter them.
//
// It keeps everything in memory, has no authentication, no TLS, no
// cluster and no deletion; it measures the adapter, not KurrentDB.
package kurrenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/serverfeatures"
	"github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/shared"
	api "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/streams"
	v2errors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
)

// Expected-revision constants of the protocol (v2 ExpectedRevisionConstants;
// v1 uses a oneof for the same states).
const (
	expectAny    int64 = -2
	expectNone   int64 = -1
	expectExists int64 = -4
)

// Options tune the server.
type Options struct {
	// Version is the server version reported to the client (default
	// 26.0.0; the client decides on the methods listed, not on it).
	Version string
	// NoAppendRecords leaves AppendRecords out of the supported methods, as
	// a KurrentDB before it does (the client then refuses to call it).
	NoAppendRecords bool
}

// Position is a place in the log: commit and prepare positions.
type Position struct{ Commit, Prepare uint64 }

func (p Position) less(q Position) bool {
	if p.Commit != q.Commit {
		return p.Commit < q.Commit
	}
	return p.Prepare < q.Prepare
}

type record struct {
	id          uuid.UUID
	stream      string
	rev         uint64
	pos         Position
	typ         string
	contentType string
	data, meta  []byte
	created     time.Time
}

// proposed is an event to write.
type proposed struct {
	id          uuid.UUID
	typ         string
	contentType string
	data, meta  []byte
}

func (p proposed) size() uint64 { return uint64(64 + len(p.typ) + len(p.data) + len(p.meta)) }

// Server is a running protocol server.
type Server struct {
	opts Options
	lis  net.Listener
	grpc *grpc.Server

	mu      sync.Mutex
	log     []*record
	streams map[string][]*record
	next    uint64        // position of the next record
	changed chan struct{} // closed (and replaced) when the log grows
}

// Start serves on a local port until Close.
func Start(opts Options) (*Server, error) {
	if opts.Version == "" {
		opts.Version = "26.0.0"
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, lis: lis, grpc: grpc.NewServer(), streams: map[string][]*record{}, changed: make(chan struct{})}
	serverfeatures.RegisterServerFeaturesServer(s.grpc, features{s: s})
	api.RegisterStreamsServer(s.grpc, streamsV1{s: s})
	v2.RegisterStreamsServiceServer(s.grpc, streamsV2{s: s})
	// A real log begins with the server's own records.
	s.WriteSystemEvent("$epoch-information", "$epoch-information")
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// URL is the connection string that reaches the server.
func (s *Server) URL() string {
	return "kurrentdb://" + s.lis.Addr().String() + "?tls=false"
}

// Close stops the server, ending open calls.
func (s *Server) Close() { s.grpc.Stop() }

// WriteSystemEvent appends an event the way the server writes its own
// (statistics, epochs, stream metadata): a $-prefixed stream or type.
func (s *Server) WriteSystemEvent(stream, typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store([]write{{stream: stream, expected: expectAny, events: []proposed{{id: uuid.New(), typ: typ, contentType: "application/json", data: []byte(`{}`)}}}})
}

// write is the part of an append that goes to one stream.
type write struct {
	stream   string
	expected int64
	events   []proposed
}

// check is a consistency check on a stream (AppendRecords), or the
// expectation of a write.
type check struct {
	stream   string
	expected int64
}

type violation struct {
	index            int
	stream           string
	expected, actual int64
}

// current is a stream's revision, -1 without events. Called with mu held.
func (s *Server) current(stream string) int64 { return int64(len(s.streams[stream])) - 1 }

func holds(expected, current int64) bool {
	switch expected {
	case expectAny:
		return true
	case expectExists:
		return current >= 0
	default:
		return expected == current
	}
}

// stored reports whether a write's events are already in its stream, at
// the place its expectation names (after the expected revision; for any
// other expectation wherever its first event is), and where they end.
// Called with mu held.
func (s *Server) stored(w write) (last *record, ok bool) {
	recs := s.streams[w.stream]
	if len(w.events) == 0 || len(recs) == 0 {
		return nil, false
	}
	start := -1
	if w.expected >= expectNone {
		start = int(w.expected + 1)
	} else {
		for i, r := range recs {
			if r.id == w.events[0].id {
				start = i
				break
			}
		}
	}
	if start < 0 || start+len(w.events) > len(recs) {
		return nil, false
	}
	for i, e := range w.events {
		if recs[start+i].id != e.id {
			return nil, false
		}
	}
	return recs[start+len(w.events)-1], true
}

// store appends writes in order, all of them or (on a violated check)
// none, after checking checks. Called with mu held.
func (s *Server) store(writes []write, checks ...check) (map[string]*record, []violation) {
	var vs []violation
	for i, c := range checks {
		if cur := s.current(c.stream); !holds(c.expected, cur) {
			vs = append(vs, violation{index: i, stream: c.stream, expected: c.expected, actual: cur})
		}
	}
	if len(vs) > 0 {
		return nil, vs
	}
	last := map[string]*record{}
	commit := s.next
	now := time.Now().UTC()
	for _, w := range writes {
		for _, e := range w.events {
			r := &record{id: e.id, stream: w.stream, rev: uint64(len(s.streams[w.stream])),
				pos: Position{Commit: commit, Prepare: s.next}, typ: e.typ, contentType: e.contentType,
				data: e.data, meta: e.meta, created: now}
			s.next += e.size()
			s.streams[w.stream] = append(s.streams[w.stream], r)
			s.log = append(s.log, r)
			last[w.stream] = r
		}
	}
	if len(last) > 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return last, nil
}

// appendIdempotent is store for the calls KurrentDB makes idempotent (v1
// Append, v2 AppendSession): a repeat of writes whose events are all
// stored where they say succeeds with the original result; a partial
// repeat is a conflict. Called with mu held.
func (s *Server) appendIdempotent(writes []write) (map[string]*record, []violation) {
	repeated := map[string]*record{}
	for _, w := range writes {
		if r, ok := s.stored(w); ok {
			repeated[w.stream] = r
		}
	}
	if len(repeated) > 0 && len(repeated) == len(writes) {
		return repeated, nil
	}
	checks := make([]check, len(writes))
	for i, w := range writes {
		checks[i] = check{stream: w.stream, expected: w.expected}
		if _, ok := repeated[w.stream]; ok && w.expected == expectAny {
			// A partly repeated write: KurrentDB refuses it rather than
			// store the events twice.
			checks[i].expected = s.current(w.stream) + 1
		}
	}
	return s.store(writes, checks...)
}

// ---- server features --------------------------------------------------------

type features struct {
	serverfeatures.UnimplementedServerFeaturesServer
	s *Server
}

func (f features) GetSupportedMethods(context.Context, *shared.Empty) (*serverfeatures.SupportedMethods, error) {
	methods := []*serverfeatures.SupportedMethod{
		{ServiceName: "event_store.client.streams.streams", MethodName: "read"},
		{ServiceName: "event_store.client.streams.streams", MethodName: "append"},
		{ServiceName: "kurrentdb.protocol.v2.streams.streamsservice", MethodName: "appendsession"},
	}
	if !f.s.opts.NoAppendRecords {
		methods = append(methods, &serverfeatures.SupportedMethod{ServiceName: "kurrentdb.protocol.v2.streams.streamsservice", MethodName: "appendrecords"})
	}
	return &serverfeatures.SupportedMethods{Methods: methods, EventStoreServerVersion: f.s.opts.Version}, nil
}

// ---- v1 streams ---------------------------------------------------------------

type streamsV1 struct {
	api.UnimplementedStreamsServer
	s *Server
}

func fromUUID(u *shared.UUID) (uuid.UUID, error) {
	if st := u.GetStructured(); st != nil {
		var b [16]byte
		for i := range 8 {
			b[i] = byte(uint64(st.MostSignificantBits) >> (56 - 8*i))
			b[8+i] = byte(uint64(st.LeastSignificantBits) >> (56 - 8*i))
		}
		return uuid.UUID(b), nil
	}
	return uuid.Parse(u.GetString_())
}

func toUUID(id uuid.UUID, structured bool) *shared.UUID {
	if !structured {
		return &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}}
	}
	var most, least uint64
	for i := range 8 {
		most = most<<8 | uint64(id[i])
		least = least<<8 | uint64(id[8+i])
	}
	return &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{
		MostSignificantBits: int64(most), LeastSignificantBits: int64(least)}}}
}

func (v streamsV1) Append(srv grpc.ClientStreamingServer[api.AppendReq, api.AppendResp]) error {
	first, err := srv.Recv()
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "the first append message must carry the options")
	}
	w := write{stream: string(opts.GetStreamIdentifier().GetStreamName()), expected: expectAny}
	switch e := opts.GetExpectedStreamRevision().(type) {
	case *api.AppendReq_Options_Revision:
		w.expected = int64(e.Revision)
	case *api.AppendReq_Options_NoStream:
		w.expected = expectNone
	case *api.AppendReq_Options_StreamExists:
		w.expected = expectExists
	}
	if w.stream == "" {
		return status.Error(codes.InvalidArgument, "empty stream name")
	}
	for {
		msg, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		m := msg.GetProposedMessage()
		if m == nil {
			return status.Error(codes.InvalidArgument, "append message without an event")
		}
		id, err := fromUUID(m.GetId())
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "event id: %v", err)
		}
		w.events = append(w.events, proposed{id: id, typ: m.GetMetadata()["type"], contentType: m.GetMetadata()["content-type"],
			data: m.GetData(), meta: m.GetCustomMetadata()})
	}
	v.s.mu.Lock()
	var (
		last map[string]*record
		vs   []violation
	)
	if len(w.events) == 0 {
		// An append without events checks the expectation and writes
		// nothing.
		_, vs = v.s.store(nil, check{stream: w.stream, expected: w.expected})
	} else {
		last, vs = v.s.appendIdempotent([]write{w})
	}
	cur := v.s.current(w.stream)
	v.s.mu.Unlock()
	if len(vs) > 0 {
		wrong := &api.AppendResp_WrongExpectedVersion{}
		if cur < 0 {
			wrong.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
		} else {
			wrong.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(cur)}
		}
		switch w.expected {
		case expectNone:
			wrong.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: &shared.Empty{}}
		case expectExists:
			wrong.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: &shared.Empty{}}
		default:
			wrong.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedRevision{ExpectedRevision: uint64(w.expected)}
		}
		return srv.SendAndClose(&api.AppendResp{Result: &api.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: wrong}})
	}
	ok := &api.AppendResp_Success{}
	if r := last[w.stream]; r != nil {
		ok.CurrentRevisionOption = &api.AppendResp_Success_CurrentRevision{CurrentRevision: r.rev}
		ok.PositionOption = &api.AppendResp_Success_Position{Position: &api.AppendResp_Position{CommitPosition: r.pos.Commit, PreparePosition: r.pos.Prepare}}
	} else {
		if cur < 0 {
			ok.CurrentRevisionOption = &api.AppendResp_Success_NoStream{NoStream: &shared.Empty{}}
		} else {
			ok.CurrentRevisionOption = &api.AppendResp_Success_CurrentRevision{CurrentRevision: uint64(cur)}
		}
		ok.PositionOption = &api.AppendResp_Success_NoPosition{NoPosition: &shared.Empty{}}
	}
	return srv.SendAndClose(&api.AppendResp{Result: &api.AppendResp_Success_{Success: ok}})
}

// filter is a subscription's or read's event filter.
type filter struct {
	onType   bool
	re       *regexp.Regexp
	prefixes []string
}

func newFilter(o *api.ReadReq_Options) (*filter, error) {
	fo := o.GetFilter()
	if fo == nil {
		return nil, nil
	}
	f := &filter{}
	var ex *api.ReadReq_Options_FilterOptions_Expression
	switch x := fo.GetFilter().(type) {
	case *api.ReadReq_Options_FilterOptions_EventType:
		f.onType, ex = true, x.EventType
	case *api.ReadReq_Options_FilterOptions_StreamIdentifier:
		ex = x.StreamIdentifier
	default:
		return nil, status.Error(codes.InvalidArgument, "filter without an expression")
	}
	if ex.GetRegex() != "" {
		re, err := regexp.Compile(ex.GetRegex())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "filter regex: %v", err)
		}
		f.re = re
	}
	f.prefixes = ex.GetPrefix()
	return f, nil
}

func (f *filter) match(r *record) bool {
	if f == nil {
		return true
	}
	v := r.stream
	if f.onType {
		v = r.typ
	}
	if f.re != nil {
		return f.re.MatchString(v)
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

func readEvent(r *record, structured bool) *api.ReadResp {
	ticks := r.created.UnixNano() / 100 // .NET ticks since the Unix epoch
	return &api.ReadResp{Content: &api.ReadResp_Event{Event: &api.ReadResp_ReadEvent{
		Event: &api.ReadResp_ReadEvent_RecordedEvent{
			Id:               toUUID(r.id, structured),
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(r.stream)},
			StreamRevision:   r.rev,
			PreparePosition:  r.pos.Prepare,
			CommitPosition:   r.pos.Commit,
			Metadata:         map[string]string{"type": r.typ, "content-type": r.contentType, "created": strconv.FormatInt(ticks, 10)},
			CustomMetadata:   r.meta,
			Data:             r.data,
		},
		Position: &api.ReadResp_ReadEvent_CommitPosition{CommitPosition: r.pos.Commit},
	}}}
}

// firstAt is the index of the first log record at or after p (after p,
// when exclusive). Called with mu held.
func (s *Server) firstAt(p Position, exclusive bool) int {
	return sort.Search(len(s.log), func(i int) bool {
		if exclusive {
			return p.less(s.log[i].pos)
		}
		return !s.log[i].pos.less(p)
	})
}

func (v streamsV1) Read(req *api.ReadReq, srv grpc.ServerStreamingServer[api.ReadResp]) error {
	o := req.GetOptions()
	if o == nil {
		return status.Error(codes.InvalidArgument, "read without options")
	}
	structured := o.GetUuidOption().GetString_() == nil
	f, err := newFilter(o)
	if err != nil {
		return err
	}
	if o.GetSubscription() != nil {
		all := o.GetAll()
		if all == nil {
			return status.Error(codes.Unimplemented, "kurrenttest serves subscriptions to $all only")
		}
		return v.subscribe(all, f, structured, srv)
	}
	count := o.GetCount()
	backwards := o.GetReadDirection() == api.ReadReq_Options_Backwards
	var out []*record
	v.s.mu.Lock()
	if st := o.GetStream(); st != nil {
		name := string(st.GetStreamIdentifier().GetStreamName())
		recs := v.s.streams[name]
		if len(recs) == 0 {
			v.s.mu.Unlock()
			return srv.Send(&api.ReadResp{Content: &api.ReadResp_StreamNotFound_{StreamNotFound: &api.ReadResp_StreamNotFound{
				StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)}}}})
		}
		from := int64(0)
		switch x := st.GetRevisionOption().(type) {
		case *api.ReadReq_Options_StreamOptions_Revision:
			from = int64(x.Revision)
		case *api.ReadReq_Options_StreamOptions_End:
			from = int64(len(recs)) // forwards from the end: nothing
			if backwards {
				from = int64(len(recs)) - 1
			}
		}
		if backwards {
			for i := min(from, int64(len(recs))-1); i >= 0 && uint64(len(out)) < count; i-- {
				out = append(out, recs[i])
			}
		} else {
			for i := from; i < int64(len(recs)) && uint64(len(out)) < count; i++ {
				out = append(out, recs[i])
			}
		}
	} else {
		all := o.GetAll()
		var start int
		switch x := all.GetAllOption().(type) {
		case *api.ReadReq_Options_AllOptions_Position:
			p := Position{Commit: x.Position.GetCommitPosition(), Prepare: x.Position.GetPreparePosition()}
			// Forwards includes the event at p; backwards starts before it.
			start = v.s.firstAt(p, false)
			if backwards {
				start--
			}
		case *api.ReadReq_Options_AllOptions_End:
			start = len(v.s.log)
			if backwards {
				start = len(v.s.log) - 1
			}
		default:
			start = 0
			if backwards {
				start = -1
			}
		}
		if backwards {
			for i := start; i >= 0 && uint64(len(out)) < count; i-- {
				if f.match(v.s.log[i]) {
					out = append(out, v.s.log[i])
				}
			}
		} else {
			for i := start; i < len(v.s.log) && uint64(len(out)) < count; i++ {
				if f.match(v.s.log[i]) {
					out = append(out, v.s.log[i])
				}
			}
		}
	}
	v.s.mu.Unlock()
	for _, r := range out {
		if err := srv.Send(readEvent(r, structured)); err != nil {
			return err
		}
	}
	return nil
}

// subscribe follows $all after the requested position: catch-up, CaughtUp,
// then live events as they are stored, until the client goes away.
func (v streamsV1) subscribe(all *api.ReadReq_Options_AllOptions, f *filter, structured bool, srv grpc.ServerStreamingServer[api.ReadResp]) error {
	s := v.s
	s.mu.Lock()
	next := 0
	switch x := all.GetAllOption().(type) {
	case *api.ReadReq_Options_AllOptions_Position:
		next = s.firstAt(Position{Commit: x.Position.GetCommitPosition(), Prepare: x.Position.GetPreparePosition()}, true)
	case *api.ReadReq_Options_AllOptions_End:
		next = len(s.log)
	}
	s.mu.Unlock()
	if err := srv.Send(&api.ReadResp{Content: &api.ReadResp_Confirmation{Confirmation: &api.ReadResp_SubscriptionConfirmation{
		SubscriptionId: uuid.NewString()}}}); err != nil {
		return err
	}
	caughtUp := false
	for {
		s.mu.Lock()
		batch := s.log[next:len(s.log):len(s.log)]
		changed := s.changed
		s.mu.Unlock()
		for _, r := range batch {
			if !f.match(r) {
				continue
			}
			if err := srv.Send(readEvent(r, structured)); err != nil {
				return err
			}
		}
		next += len(batch)
		if len(batch) > 0 && f != nil {
			last := batch[len(batch)-1].pos
			if err := srv.Send(&api.ReadResp{Content: &api.ReadResp_Checkpoint_{Checkpoint: &api.ReadResp_Checkpoint{
				CommitPosition: last.Commit, PreparePosition: last.Prepare, Timestamp: timestamppb.Now()}}}); err != nil {
				return err
			}
		}
		if !caughtUp {
			caughtUp = true
			cu := &api.ReadResp_CaughtUp{Timestamp: timestamppb.Now()}
			if next > 0 {
				p := batchEnd(s, next)
				cu.Position = &api.ReadResp_Position{CommitPosition: p.Commit, PreparePosition: p.Prepare}
			}
			if err := srv.Send(&api.ReadResp{Content: &api.ReadResp_CaughtUp_{CaughtUp: cu}}); err != nil {
				return err
			}
		}
		select {
		case <-srv.Context().Done():
			return srv.Context().Err()
		case <-changed:
		}
	}
}

func batchEnd(s *Server, next int) Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log[next-1].pos
}

// ---- v2 streams ---------------------------------------------------------------

type streamsV2 struct {
	v2.UnimplementedStreamsServiceServer
	s *Server
}

// detailed is a status error with the details the client maps to its
// typed errors (kurrentdb.StreamRevisionConflictError and others).
func detailed(c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(c, msg)
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

func proposedFromRecord(r *v2.AppendRecord) (proposed, error) {
	id := uuid.New()
	if r.RecordId != nil {
		var err error
		if id, err = uuid.Parse(r.GetRecordId()); err != nil {
			return proposed{}, status.Errorf(codes.InvalidArgument, "record id %q: %v", r.GetRecordId(), err)
		}
	}
	if r.GetSchema().GetName() == "" {
		return proposed{}, status.Error(codes.InvalidArgument, "record without a schema name")
	}
	// The properties become the event's metadata, beside the schema
	// properties the server adds.
	props := map[string]any{}
	for k, val := range r.GetProperties() {
		if strings.HasPrefix(k, "$") {
			return proposed{}, status.Errorf(codes.InvalidArgument, "property %q: user properties must not start with $", k)
		}
		props[k] = structToAny(val)
	}
	format := "Bytes"
	contentType := "application/octet-stream"
	if r.GetSchema().GetFormat() == v2.SchemaFormat_SCHEMA_FORMAT_JSON {
		format, contentType = "Json", "application/json"
	}
	props["$schema.name"] = r.GetSchema().GetName()
	props["$schema.data-format"] = format
	meta, err := json.Marshal(props)
	if err != nil {
		return proposed{}, status.Errorf(codes.InvalidArgument, "properties: %v", err)
	}
	return proposed{id: id, typ: r.GetSchema().GetName(), contentType: contentType, data: r.GetData(), meta: meta}, nil
}

func structToAny(v *structpb.Value) any { return v.AsInterface() }

func conflictError(v violation) error {
	return detailed(codes.FailedPrecondition, fmt.Sprintf("stream %q: expected revision %d, actual %d", v.stream, v.expected, v.actual),
		&v2errors.StreamRevisionConflictErrorDetails{Stream: v.stream, ExpectedRevision: v.expected, ActualRevision: v.actual})
}

func (v streamsV2) AppendSession(srv grpc.ClientStreamingServer[v2.AppendRequest, v2.AppendSessionResponse]) error {
	var writes []write
	seen := map[string]bool{}
	for {
		req, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		stream := req.GetStream()
		if seen[stream] {
			return detailed(codes.Aborted, fmt.Sprintf("stream %q appears twice in the session", stream),
				&v2errors.StreamAlreadyInAppendSessionErrorDetails{Stream: stream})
		}
		seen[stream] = true
		if len(req.GetRecords()) == 0 {
			return status.Errorf(codes.InvalidArgument, "append request for stream %q has no records", stream)
		}
		w := write{stream: stream, expected: expectAny}
		if req.ExpectedRevision != nil {
			w.expected = req.GetExpectedRevision()
		}
		for _, r := range req.GetRecords() {
			p, err := proposedFromRecord(r)
			if err != nil {
				return err
			}
			w.events = append(w.events, p)
		}
		writes = append(writes, w)
	}
	if len(writes) == 0 {
		return status.Error(codes.FailedPrecondition, "append session without requests")
	}
	v.s.mu.Lock()
	last, vs := v.s.appendIdempotent(writes)
	v.s.mu.Unlock()
	if len(vs) > 0 {
		return conflictError(vs[0])
	}
	resp := &v2.AppendSessionResponse{}
	var end Position
	for _, w := range writes {
		r := last[w.stream]
		pos := int64(r.pos.Commit)
		resp.Output = append(resp.Output, &v2.AppendResponse{Stream: w.stream, StreamRevision: int64(r.rev), Position: &pos})
		if end.less(r.pos) {
			end = r.pos
		}
	}
	resp.Position = int64(end.Commit)
	return srv.SendAndClose(resp)
}

func (v streamsV2) AppendRecords(_ context.Context, req *v2.AppendRecordsRequest) (*v2.AppendRecordsResponse, error) {
	if v.s.opts.NoAppendRecords {
		return nil, status.Error(codes.Unimplemented, "AppendRecords is not supported by this server version")
	}
	if len(req.GetRecords()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "at least one record is required")
	}
	// Records keep their order in the log; consecutive records of one
	// stream form one write.
	var writes []write
	for _, r := range req.GetRecords() {
		if r.GetStream() == "" {
			return nil, status.Error(codes.InvalidArgument, "record without a stream")
		}
		p, err := proposedFromRecord(r)
		if err != nil {
			return nil, err
		}
		if n := len(writes); n > 0 && writes[n-1].stream == r.GetStream() {
			writes[n-1].events = append(writes[n-1].events, p)
			continue
		}
		writes = append(writes, write{stream: r.GetStream(), expected: expectAny, events: []proposed{p}})
	}
	checks := make([]check, len(req.GetChecks()))
	for i, c := range req.GetChecks() {
		ss := c.GetStreamState()
		if ss == nil {
			return nil, status.Error(codes.InvalidArgument, "consistency check without a stream state")
		}
		checks[i] = check{stream: ss.GetStream(), expected: ss.GetExpectedState()}
	}
	v.s.mu.Lock()
	last, vs := v.s.store(writes, checks...)
	v.s.mu.Unlock()
	if len(vs) > 0 {
		details := &v2errors.AppendConsistencyViolationErrorDetails{}
		for _, x := range vs {
			details.Violations = append(details.Violations, &v2errors.ConsistencyViolation{CheckIndex: int32(x.index),
				Type: &v2errors.ConsistencyViolation_StreamState{StreamState: &v2errors.ConsistencyViolation_StreamStateViolation{
					Stream: x.stream, ExpectedState: x.expected, ActualState: x.actual}}})
		}
		return nil, detailed(codes.FailedPrecondition, fmt.Sprintf("%d consistency check(s) violated", len(vs)), details)
	}
	resp := &v2.AppendRecordsResponse{}
	var end Position
	for stream, r := range last {
		resp.Revisions = append(resp.Revisions, &v2.StreamRevision{Stream: stream, Revision: int64(r.rev)})
		if end.less(r.pos) {
			end = r.pos
		}
	}
	resp.Position = int64(end.Commit)
	return resp, nil
}

// Serve starts a server with default options for tb, closed when it ends.
func Serve(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start(Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// URL is the server a test of the kurrent adapter runs against: the one
// KURRENTDB_URL names (a real KurrentDB, for whoever has one), or else a
// protocol server of tb's own.
func URL(tb testing.TB) string {
	if url := os.Getenv("KURRENTDB_URL"); url != "" {
		return url
	}
	return Serve(tb).URL()
}
