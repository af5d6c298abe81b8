package webhooks

import "sync"

// Seams for the tests of this package: hooks the production code calls
// through package variables, set here per dispatcher or outbox.

var (
	waitingHooks sync.Map // *Dispatcher → func()
	readHooks    sync.Map // *Outbox → func()
)

func init() {
	testHookWaiting = func(d *Dispatcher) {
		if f, ok := waitingHooks.Load(d); ok {
			f.(func())()
		}
	}
	testHookBetweenReads = func(o *Outbox) {
		if f, ok := readHooks.Load(o); ok {
			f.(func())()
		}
	}
}

// onWaiting makes f run each time d's Run has done what woke it and goes
// back to waiting for a wake-up.
func onWaiting(d *Dispatcher, f func()) { waitingHooks.Store(d, f) }

// betweenReads makes f run between the statements of o's delivery log
// reads.
func betweenReads(o *Outbox, f func()) { readHooks.Store(o, f) }
