// The server's in-memory log: writes checked against expected revisions,
// all or none.

package kurrenttest

import (
	"time"
)

// write is the part of an append that goes to one stream.
type write struct {
	stream   string
	expected int64
	events   []proposed
}

// check is a consistency check on a stream (AppendRecords), or the
// expectation of a write.
type check struct {
	stream   string
	expected int64
}

type violation struct {
	index            int
	stream           string
	expected, actual int64
}

// current is a stream's revision, -1 without events. Called with mu held.
func (s *Server) current(stream string) int64 { return int64(len(s.streams[stream])) - 1 }

func holds(expected, current int64) bool {
	switch expected {
	case expectAny:
		return true
	case expectExists:
		return current >= 0
	default:
		return expected == current
	}
}

// stored reports whether a write's events are already in its stream, at
// the place its expectation names (after the expected revision; for any
// other expectation wherever its first event is), and where they end.
// Called with mu held.
func (s *Server) stored(w write) (last *record, ok bool) {
	recs := s.streams[w.stream]
	if len(w.events) == 0 || len(recs) == 0 {
		return nil, false
	}
	start := -1
	if w.expected >= expectNone {
		start = int(w.expected + 1)
	} else {
		for i, r := range recs {
			if r.id == w.events[0].id {
				start = i
				break
			}
		}
	}
	if start < 0 || start+len(w.events) > len(recs) {
		return nil, false
	}
	for i, e := range w.events {
		if recs[start+i].id != e.id {
			return nil, false
		}
	}
	return recs[start+len(w.events)-1], true
}

// store appends writes in order, all of them or (on a violated check)
// none, after checking checks. Called with mu held.
func (s *Server) store(writes []write, checks ...check) (map[string]*record, []violation) {
	var vs []violation
	for i, c := range checks {
		if cur := s.current(c.stream); !holds(c.expected, cur) {
			vs = append(vs, violation{index: i, stream: c.stream, expected: c.expected, actual: cur})
		}
	}
	if len(vs) > 0 {
		return nil, vs
	}
	last := map[string]*record{}
	commit := s.next
	now := time.Now().UTC()
	for _, w := range writes {
		for _, e := range w.events {
			r := &record{id: e.id, stream: w.stream, rev: uint64(len(s.streams[w.stream])),
				pos: Position{Commit: commit, Prepare: s.next}, typ: e.typ, contentType: e.contentType,
				data: e.data, meta: e.meta, created: now}
			s.next += e.size()
			s.streams[w.stream] = append(s.streams[w.stream], r)
			s.log = append(s.log, r)
			last[w.stream] = r
		}
	}
	if len(last) > 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return last, nil
}

// appendIdempotent is store for the calls KurrentDB makes idempotent (v1
// Append, v2 AppendSession): a repeat of writes whose events are all
// stored where they say succeeds with the original result; a partial
// repeat is a conflict. Called with mu held.
func (s *Server) appendIdempotent(writes []write) (map[string]*record, []violation) {
	repeated := map[string]*record{}
	for _, w := range writes {
		if r, ok := s.stored(w); ok {
			repeated[w.stream] = r
		}
	}
	if len(repeated) > 0 && len(repeated) == len(writes) {
		return repeated, nil
	}
	checks := make([]check, len(writes))
	for i, w := range writes {
		checks[i] = check{stream: w.stream, expected: w.expected}
		if _, ok := repeated[w.stream]; ok && w.expected == expectAny {
			// A partly repeated write: KurrentDB refuses it rather than
			// store the events twice.
			checks[i].expected = s.current(w.stream) + 1
		}
	}
	return s.store(writes, checks...)
}
