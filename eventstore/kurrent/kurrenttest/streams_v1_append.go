// The v1 Streams service's Append.

package kurrenttest

import (
	"errors"
	"io"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/shared"
	api "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/streams"
)

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
