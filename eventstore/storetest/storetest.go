// Package storetest is the conformance suite every eventstore.Store adapter
// runs. Each subtest uses its own stream-name prefix and only looks at its
// own streams in the global log, so the suite also works against a server
// shared with other clients (KurrentDB).
package storetest

import (
	"testing"

	"github.com/escrowd/escrowd/eventstore"
)

// Limits are what a store's server cannot do although the port asks it;
// the suite does not ask it of a store that declares the limit.
type Limits struct {
	// EventIDsPerStream: the store deduplicates an event id within its
	// stream only, as KurrentDB does; reusing one in another stream is not
	// refused with ErrDuplicateEvent.
	EventIDsPerStream bool
}

// Run runs the suite; newStore must return a store whose streams do not
// collide with other subtests (a fresh database, or a shared server).
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	RunWithLimits(t, newStore, Limits{})
}

// RunWithLimits is Run for a store with limits.
func RunWithLimits(t *testing.T, newStore func(t *testing.T) eventstore.Store, limits Limits) {
	t.Run("AppendAndReadStream", func(t *testing.T) { testAppendAndReadStream(t, newStore(t)) })
	t.Run("ExpectedRevisions", func(t *testing.T) { testExpectedRevisions(t, newStore(t)) })
	t.Run("AtomicAcrossStreams", func(t *testing.T) { testAtomicAcrossStreams(t, newStore(t)) })
	t.Run("ZeroEventRevisionCheck", func(t *testing.T) { testZeroEventRevisionCheck(t, newStore(t)) })
	t.Run("ObservedRevisionCheck", func(t *testing.T) { testObservedRevisionCheck(t, newStore(t)) })
	t.Run("ConcurrentAppendsOneStream", func(t *testing.T) { testConcurrentAppendsOneStream(t, newStore(t)) })
	t.Run("ConcurrentAppendsSharedStreams", func(t *testing.T) { testConcurrentAppendsSharedStreams(t, newStore(t)) })
	t.Run("FailedAppendMovesNoStream", func(t *testing.T) { testFailedAppendMovesNoStream(t, newStore(t)) })
	t.Run("IdempotentEventIDs", func(t *testing.T) { testIdempotentEventIDs(t, newStore(t), limits) })
	t.Run("ConcurrentIdenticalRetries", func(t *testing.T) { testConcurrentIdenticalRetries(t, newStore(t)) })
	t.Run("GlobalOrder", func(t *testing.T) { testGlobalOrder(t, newStore(t)) })
	t.Run("OneAppendInStreamNameOrder", func(t *testing.T) { testOneAppendInStreamNameOrder(t, newStore(t)) })
	t.Run("LargeBatch", func(t *testing.T) { testLargeBatch(t, newStore(t)) })
	t.Run("SubscribeCatchUpThenLive", func(t *testing.T) { testSubscribeCatchUpThenLive(t, newStore(t)) })
	t.Run("SubscribeResumeFromCheckpoint", func(t *testing.T) { testSubscribeResume(t, newStore(t)) })
	t.Run("SubscribeStops", func(t *testing.T) { testSubscribeStops(t, newStore(t)) })
	t.Run("GapSafety", func(t *testing.T) { testGapSafety(t, newStore(t)) })
	t.Run("LastCoversAcknowledgedAppends", func(t *testing.T) { testLastCoversAcknowledgedAppends(t, newStore(t)) })
	t.Run("TenantRead", func(t *testing.T) { testTenantRead(t, newStore(t)) })
}

// ---- helpers ----------------------------------------------------------------

// ---- subtests ---------------------------------------------------------------
