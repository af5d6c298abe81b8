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
	"errors"
	"fmt"
	"log"
	"math"

	"github.com/google/uuid"
	"github.com/kurrent-io/KurrentDB-Client-Go/kurrentdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/escrowd/escrowd/eventstore"
)

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

// Head is the position of the last non-system event in $all.
