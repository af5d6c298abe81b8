// Package chaos is the bank-transfer invariant harness, in the
// spirit of Jepsen's bank test and TigerBeetle's simulator. Its test builds
// the escrowd binary, starts a PostgreSQL cluster of its own on loopback,
// runs several `escrowd serve` processes over it, drives a bounded mixed
// workload of every money operation through their HTTP API while it kills
// instances, restarts the database, misbehaves as a webhook receiver and
// retries timed-out requests with their Idempotency-Key, and then checks
// that nothing acknowledged was lost, nothing was applied twice, every
// account balances to zero and every read model equals a replay of the log.
//
// `go test ./internal/chaos` runs a short round (part of `make test`);
// `make chaos` runs it for CHAOS_DURATION (10 minutes by default).
package chaos
