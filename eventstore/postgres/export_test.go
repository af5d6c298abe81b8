package postgres

// SetTailWindow sets how many events the shared tail keeps (at least; it
// trims back to n once it holds 2n), so tests can make followers cross the
// window's edges often. Call it before the first Subscribe.
func SetTailWindow(s *Store, n int) { s.tail.max = n }

// TailHits is how many reads the shared tail answered from its window.
func TailHits(s *Store) int {
	s.tail.mu.Lock()
	defer s.tail.mu.Unlock()
	return s.tail.hits
}

// Stopping is closed once Close has begun stopping the store's background
// loops.
func Stopping(s *Store) <-chan struct{} { return s.bg.Done() }

// NotifyChannel is the channel appends are announced on.
const NotifyChannel = notifyChannel

// Wakes is how many times the store woke its subscribers.
func Wakes(s *Store) uint64 { return s.wake.generation() }
