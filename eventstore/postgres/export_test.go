package postgres

import "github.com/escrowd/escrowd/eventstore"

// SetTailWindow sets how many events the shared tail keeps (at least; it
// trims back to n once it holds 2n), so tests can make followers cross the
// window's edges often. Call it before the first Subscribe.
func SetTailWindow(s *Store, n int) { s.tail.max = n }

// TailHits is how many reads the shared tail answered from its window.
func TailHits(s *Store) int { return int(s.tail.hits.Load()) }

// TailReads is how many times the shared tail read the database.
func TailReads(s *Store) int64 { return s.tail.reads.Load() }

// Stopping is closed once Close has begun stopping the store's background
// loops.
func Stopping(s *Store) <-chan struct{} { return s.bg.Done() }

// NotifyChannel is the channel appends are announced on.
const NotifyChannel = notifyChannel

// Wakes is how many times the store woke its subscribers.
func Wakes(s *Store) uint64 { return s.wake.generation() }

// Outcome is one append's result in AppendTogether.
type Outcome struct {
	Result eventstore.AppendResult
	Err    error
}

// AppendTogether sends the appends as one group, exactly as a call that
// finds them queued does (each append's streams must not be written by
// another, as the queue guarantees).
func AppendTogether(s *Store, appends ...[]eventstore.StreamAppend) []Outcome {
	reqs := make([]*appendReq, len(appends))
	out := make([]Outcome, len(appends))
	var batch []*appendReq
	for i, a := range appends {
		r, err := newAppendReq(a)
		if err != nil {
			out[i].Err = err
			continue
		}
		r.done = make(chan struct{})
		reqs[i] = r
		batch = append(batch, r)
	}
	s.appendMany(batch)
	for i, r := range reqs {
		if r != nil {
			out[i] = Outcome{r.res, r.err}
		}
	}
	return out
}

// Take is the queue's grouping rule: which of the appends, queued in this
// order, the next call takes (by index).
func Take(appends ...[]eventstore.StreamAppend) []int {
	var g appendGroup
	index := map[*appendReq]int{}
	for i, a := range appends {
		r, err := newAppendReq(a)
		if err != nil {
			panic(err)
		}
		index[r] = i
		g.queue = append(g.queue, r)
	}
	var taken []int
	for _, r := range g.take() {
		taken = append(taken, index[r])
	}
	return taken
}

// Queued is how many appends wait in the store's queue for a call.
func Queued(s *Store) int {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return len(s.group.queue)
}
