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
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/serverfeatures"
	"github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/shared"
	api "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v1/streams"
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
	// 26.1.0, the first with AppendRecords; the client decides on the methods listed, not on it).
	Version string
	// NoAppendRecords leaves AppendRecords out of the supported methods, as
	// a KurrentDB before it does (the client then refuses to call it).
	NoAppendRecords bool
	// Addr is the address to listen on (default 127.0.0.1 and a free
	// port); it must be a loopback address.
	Addr string
	// TLS, when set, serves gRPC over TLS with it (a secure node).
	TLS *tls.Config
	// FollowerLag makes reads that do not ask for the leader (no
	// requires-leader header) answer as a follower that has not yet
	// replicated the newest FollowerLag records of the log.
	FollowerLag int
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
		opts.Version = "26.1.0"
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || !net.ParseIP(host).IsLoopback() {
		return nil, fmt.Errorf("kurrenttest: listen address %q is not a loopback address", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	gopts := []grpc.ServerOption{grpc.UnaryInterceptor(authUnary), grpc.StreamInterceptor(authStream)}
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s := &Server{opts: opts, lis: lis, grpc: grpc.NewServer(gopts...), streams: map[string][]*record{}, changed: make(chan struct{})}
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
	if s.opts.TLS != nil {
		return "kurrentdb://" + s.lis.Addr().String() + "?tls=true"
	}
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

// ---- v2 streams ---------------------------------------------------------------

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

// ---- authentication -----------------------------------------------------------

// defaultCredentials are a new KurrentDB node's administrator, the only
// user the server knows. A call without credentials is let through, as on
// a node that allows anonymous access; a call with others is refused, as
// the server refuses them.
var defaultCredentials = "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:changeit"))

func authenticate(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if v != defaultCredentials {
			return status.Error(codes.Unauthenticated, "Bad credentials")
		}
	}
	return nil
}

func authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := authenticate(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := authenticate(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
