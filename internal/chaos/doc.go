// Package chaos is the bank-transfer invariant harness, in the
// spirit of Jepsen's bank test and TigerBeetle's simulator. Its test builds
// the escrowd binary, starts a PostgreSQL cluster of its own on loopback,
// runs several `escrowd serve` processes over it, drives a bounded mixed
// workload of every money operation through their HTTP API while it kills
// instances, restarts the database, misbehaves as a webhook receiver and
// retries timed-out requests with their Idempotency-Key, and then checks
// that nothing acknowledged was lost, nothing was applied twice, every
// account balances to zero and every read model equals a replay of the log.
// Its test environment runs on the Paystack simulator, in the test's own
// process: deposits into dedicated accounts, card payments of escrows and
// bank payouts go through it, its events reach the instances through a
// proxy, and the simulator's record of money received and paid out must
// agree with the ledger.
//
// TestThreeInstances runs three instances on one database behind a
// round-robin proxy of its own, kills them in turn under a workload that
// stores files, and checks that the survivors answered every request and
// that every file is served by every instance.
//
// `go test ./internal/chaos` runs short rounds of both (part of `make
// test`); `make chaos` runs them for CHAOS_DURATION (10 minutes by
// default) and INSTANCES_DURATION (5 minutes).
package chaos
