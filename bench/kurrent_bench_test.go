package bench

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
	"github.com/escrowd/escrowd/eventstore/kurrent/kurrenttest"
)

// BenchmarkKurrentAdapter measures the KurrentDB adapter against the
// in-memory protocol server (kurrenttest) in this process: the adapter,
// the client and gRPC over loopback, not KurrentDB (no disk, no
// replication; the server shares the CPU with the benchmark). The same
// shapes as BenchmarkAppend1Writer, BenchmarkAppend16Writers and
// BenchmarkEscrowLifecycleHTTP (read models stay in PostgreSQL there).
func BenchmarkKurrentAdapter(b *testing.B) {
	b.Run("append/writers=1", func(b *testing.B) { benchAppend1Writer(b, kurrentBenchStore(b)) })
	b.Run("append/writers=16", func(b *testing.B) { benchAppendWriters(b, kurrentBenchStore(b), 16) })
	b.Run("lifecycle/clients=16", func(b *testing.B) {
		benchEscrowLifecycleOn(b, escrowClients, newBenchServerOn(b, func(*pgxpool.Pool) eventstore.Store { return kurrentBenchStore(b) }, nil))
	})
}

// kurrentBenchStore is the adapter on a protocol server of its own.
func kurrentBenchStore(b *testing.B) *kurrent.Store {
	b.Helper()
	s, err := kurrent.Open(kurrenttest.Serve(b).URL())
	if err != nil {
		b.Fatal(err)
	}
	return s
}
