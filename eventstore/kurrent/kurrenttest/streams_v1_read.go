// The v1 Streams service's Read: streams, the global log and subscriptions.

package kurrenttest

import (
	"context"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/shared"
	api "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/streams"
)

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
func (s *Server) firstAt(p Position, exclusive bool) int { return firstAt(s.log, p, exclusive) }

// firstAt is the index of the first record of log at or after p (after p,
// when exclusive).
func firstAt(log []*record, p Position, exclusive bool) int {
	return sort.Search(len(log), func(i int) bool {
		if exclusive {
			return p.less(log[i].pos)
		}
		return !log[i].pos.less(p)
	})
}

// replicated is the log as the node answering a read has it: all of it
// for a read that requires the leader, without the newest FollowerLag
// records for any other. Called with mu held.
func (s *Server) replicated(ctx context.Context) []*record {
	if s.opts.FollowerLag == 0 {
		return s.log
	}
	if md, _ := metadata.FromIncomingContext(ctx); slices.Contains(md.Get("requires-leader"), "true") {
		return s.log
	}
	return s.log[:max(0, len(s.log)-s.opts.FollowerLag)]
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
	log := v.s.replicated(srv.Context())
	if st := o.GetStream(); st != nil {
		name := string(st.GetStreamIdentifier().GetStreamName())
		recs := v.s.streams[name]
		for len(recs) > 0 && (len(log) == 0 || log[len(log)-1].pos.less(recs[len(recs)-1].pos)) {
			recs = recs[:len(recs)-1]
		}
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
			start = firstAt(log, p, false)
			if backwards {
				start--
			}
		case *api.ReadReq_Options_AllOptions_End:
			start = len(log)
			if backwards {
				start = len(log) - 1
			}
		default:
			start = 0
			if backwards {
				start = -1
			}
		}
		if backwards {
			for i := start; i >= 0 && uint64(len(out)) < count; i-- {
				if f.match(log[i]) {
					out = append(out, log[i])
				}
			}
		} else {
			for i := start; i < len(log) && uint64(len(out)) < count; i++ {
				if f.match(log[i]) {
					out = append(out, log[i])
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
