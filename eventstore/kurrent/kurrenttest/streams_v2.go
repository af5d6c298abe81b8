// The v2 Streams service: AppendSession and AppendRecords across streams.

package kurrenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/structpb"

	v2errors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
)

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
	props["$schema.format"] = format
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
