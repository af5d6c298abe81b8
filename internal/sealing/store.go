package sealing

import (
	"context"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/keyring"
)

// Store seals the declared fields of the events appended through it and
// opens those it reads, over another store.
type Store struct {
	inner eventstore.Store
	keys  Keys
	// shared opens the events subscribers are handed once for all of
	// them (opencache.go).
	shared *openCache
}

// Wrap is inner behind the codec. The result has the optional interfaces
// of a PostgreSQL store (horizon, counts, snapshots, tenant reads) when
// inner has them.
func Wrap(inner eventstore.Store, keys Keys) eventstore.Store {
	s := &Store{inner: inner, keys: keys, shared: newOpenCache(keys)}
	if f, ok := inner.(fullStore); ok {
		return &Full{Store: s, full: f}
	}
	return s
}

// BlindIndex is the keyring's keyed hash of value for purpose: what names
// a unique value (a customer's email) without holding it.
func (s *Store) BlindIndex(ctx context.Context, purpose, value string) (string, error) {
	return s.keys.BlindIndex(ctx, purpose, value)
}

// ForgetCustomer makes customer id's data read Erased through this store
// (and every value sealed with its keys) at once: their erasure is on
// record, and their key is being destroyed (keyring.Keyring.Forget). With
// keys that cannot forget, nothing changes before the destruction.
func (s *Store) ForgetCustomer(id string) {
	if f, ok := s.keys.(interface{ Forget(keyring.Subject) }); ok {
		f.Forget(keyring.Customer(id))
	}
}

// Unwrap is the store under the codec (whose events are sealed).
func (s *Store) Unwrap() eventstore.Store { return s.inner }

// SealEvent returns data of an event stored already (of stream, with
// metadata) with the fields typ declares sealed that are still plain;
// data unchanged when there are none.
func SealEvent(ctx context.Context, keys Keys, stream, typ string, data, metadata []byte) ([]byte, error) {
	out, _, err := sealEvent(ctx, keys, stream, typ, data, metadata, true)
	return out, err
}

// sealing is what sealEvent did to an event's data.
type sealing int

const (
	nothingSealed sealing = iota // nothing to seal: data as given
	allSealed                    // sealed: opens to data as given
	someErased                   // a value written Erased: opens to less
)

// sealEvent seals the fields typ declares sealed of a new event's data
// (resealing: of a stored event's, sealing only those still plain),
// reporting what it did.
func sealEvent(ctx context.Context, keys Keys, stream, typ string, data, metadata []byte, resealing bool) ([]byte, sealing, error) {
	r, ok := rules[typ]
	if !ok || !mayHold(data, r.keys) {
		return data, nothingSealed, nil
	}
	t := &transform{ctx: ctx, keys: keys, typ: typ, seal: true, resealing: resealing}
	out, err := t.value(jsontext.Value(data), r.root, r.subject(stream, metadata), "")
	if err != nil {
		return nil, nothingSealed, fmt.Errorf("sealing: %s in %s: %w", typ, stream, err)
	}
	if t.erased {
		return out, someErased, nil
	}
	return out, allSealed, nil
}

// Append seals the events' fields and appends them. Once they are stored,
// the data as given is what this process's subscribers are handed for
// them (the shared cache of opened data): they need not open what was
// just sealed.
func (s *Store) Append(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	// Copies are made on the first change: the caller's slices stay as
	// given (the engine appends them again after a conflict).
	var (
		out   []eventstore.StreamAppend
		plain []eventstore.EventData
		epoch = s.shared.epochNow()
	)
	for i, a := range appends {
		copied := false
		for j, e := range a.Events {
			data, did, err := sealEvent(ctx, s.keys, a.Stream, e.Type, e.Data, e.Metadata, false)
			if err != nil {
				return eventstore.AppendResult{}, err
			}
			if did == nothingSealed {
				continue
			}
			if did == allSealed {
				plain = append(plain, e)
			}
			if out == nil {
				out = append([]eventstore.StreamAppend(nil), appends...)
			}
			if !copied {
				out[i].Events, copied = append([]eventstore.EventData(nil), a.Events...), true
			}
			out[i].Events[j].Data = data
		}
	}
	if out == nil {
		return s.inner.Append(ctx, appends...)
	}
	res, err := s.inner.Append(ctx, out...)
	if err == nil {
		for _, e := range plain {
			s.shared.put(e.ID, e.Data, epoch)
		}
	}
	return res, err
}

// opened returns events with their sealed fields opened. Events holding
// nothing sealed come back as they are; the others go into a copy of the
// slice, never into the one given: a store may hand the same events to
// several readers (the PostgreSQL store's subscribers share one read of
// the log).
func (s *Store) opened(ctx context.Context, events []eventstore.RecordedEvent, err error) ([]eventstore.RecordedEvent, error) {
	return s.openedVia(ctx, nil, events, err)
}

// openedVia is opened, taking and keeping the opened data in cache when
// it is not nil.
func (s *Store) openedVia(ctx context.Context, cache *openCache, events []eventstore.RecordedEvent, err error) ([]eventstore.RecordedEvent, error) {
	if err != nil {
		return events, err
	}
	var out []eventstore.RecordedEvent
	for i := range events {
		if !Sealed(events[i].Data) {
			continue
		}
		data, err := s.openOne(ctx, cache, &events[i])
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = append([]eventstore.RecordedEvent(nil), events...)
		}
		out[i].Data = data
	}
	if out == nil {
		return events, nil
	}
	return out, nil
}

// openOne is e's data opened, from cache when it holds it.
func (s *Store) openOne(ctx context.Context, cache *openCache, e *eventstore.RecordedEvent) ([]byte, error) {
	if cache == nil {
		return open(ctx, s.keys, e.Type, e.Data)
	}
	if data, ok := cache.get(e.ID); ok {
		return data, nil
	}
	epoch := cache.epochNow()
	data, err := open(ctx, s.keys, e.Type, e.Data)
	if err == nil {
		cache.put(e.ID, data, epoch)
	}
	return data, err
}

func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]eventstore.RecordedEvent, error) {
	events, err := s.inner.ReadStream(ctx, stream, from, limit)
	return s.opened(ctx, events, err)
}

func (s *Store) ReadAll(ctx context.Context, after eventstore.Position, limit int) ([]eventstore.RecordedEvent, error) {
	events, err := s.inner.ReadAll(ctx, after, limit)
	return s.opened(ctx, events, err)
}

func (s *Store) Head(ctx context.Context) (eventstore.Position, error) { return s.inner.Head(ctx) }
func (s *Store) Last(ctx context.Context) (eventstore.Position, error) { return s.inner.Last(ctx) }

func (s *Store) Subscribe(ctx context.Context, after eventstore.Position, handle func(context.Context, []eventstore.RecordedEvent) error) error {
	return s.inner.Subscribe(ctx, after, func(ctx context.Context, events []eventstore.RecordedEvent) error {
		// A subscriber's batch may be shared with the process's other
		// subscribers (the store's tail): opened never writes into it.
		events, err := s.openedVia(ctx, s.shared, events, nil)
		if err != nil {
			return err
		}
		return handle(ctx, events)
	})
}

func (s *Store) Close() { s.inner.Close() }

// fullStore is what a PostgreSQL store offers besides Store.
type fullStore interface {
	eventstore.Store
	eventstore.HorizonReporter
	eventstore.SnapshotStore
	eventstore.TenantReader
	CountEvents(ctx context.Context, after, upTo eventstore.Position, limit int64) (int64, error)
}

// Full is Store over a store with fullStore's interfaces.
type Full struct {
	*Store
	full fullStore
}

func (f *Full) Horizon(ctx context.Context, limit int64, explainAfter time.Duration) (eventstore.Horizon, error) {
	return f.full.Horizon(ctx, limit, explainAfter)
}

func (f *Full) CountEvents(ctx context.Context, after, upTo eventstore.Position, limit int64) (int64, error) {
	return f.full.CountEvents(ctx, after, upTo, limit)
}

func (f *Full) ReadTenant(ctx context.Context, tf eventstore.TenantFilter, after eventstore.Position, skip, limit int) ([]eventstore.RecordedEvent, error) {
	events, err := f.full.ReadTenant(ctx, tf, after, skip, limit)
	return f.opened(ctx, events, err)
}

func (f *Full) CountTenant(ctx context.Context, tf eventstore.TenantFilter) (int64, error) {
	return f.full.CountTenant(ctx, tf)
}

// Snapshots are folded states, which hold what the events sealed: a
// snapshot is sealed whole, a customer's with the customer's key (so that
// forgetting them leaves none that opens), any other with the service's
// snapshot key. One that no longer opens is no snapshot: the stream is
// replayed from its events.
func (f *Full) ReadSnapshot(ctx context.Context, stream string) (eventstore.Snapshot, bool, error) {
	snap, ok, err := f.full.ReadSnapshot(ctx, stream)
	if err != nil || !ok {
		return snap, ok, err
	}
	data, sealed, err := openSnapshot(ctx, f.keys, stream, snap.Data)
	if err != nil || !sealed {
		// An unsealed one is from before sealing: ignored, it is replaced.
		return eventstore.Snapshot{}, false, err
	}
	if data == nil {
		return eventstore.Snapshot{}, false, nil
	}
	snap.Data = data
	return snap, true, nil
}

func (f *Full) WriteSnapshot(ctx context.Context, snap eventstore.Snapshot) error {
	data, err := sealSnapshot(ctx, f.keys, snap.Stream, snap.Data)
	if err != nil {
		return err
	}
	snap.Data = data
	return f.full.WriteSnapshot(ctx, snap)
}

// snapshotSubject is the key a stream's snapshots are sealed with.
func snapshotSubject(stream string) keyring.Subject {
	if id, ok := cutPrefix(stream, "customer-"); ok {
		return keyring.Customer(id)
	}
	return keyring.Subject("service:snapshots")
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

const snapshotType = "snapshot"

// sealSnapshot is the JSON string of the sealed snapshot.
func sealSnapshot(ctx context.Context, keys Keys, stream string, data []byte) ([]byte, error) {
	v, err := sealValue(ctx, keys, snapshotSubject(stream), snapshotType, stream, string(data))
	if err != nil {
		return nil, err
	}
	return jsontext.AppendQuote(nil, v)
}

// openSnapshot opens a sealed snapshot: sealed false when data is not one,
// data nil when its key was destroyed.
func openSnapshot(ctx context.Context, keys Keys, stream string, data []byte) ([]byte, bool, error) {
	if !Sealed(data) || jsontext.Value(data).Kind() != '"' {
		return nil, false, nil
	}
	s, err := jsontext.AppendUnquote(nil, data)
	if err != nil {
		return nil, false, err
	}
	plain, err := openValue(ctx, keys, snapshotType, stream, string(s))
	if err != nil {
		return nil, true, err
	}
	if plain == Erased {
		return nil, true, nil
	}
	return []byte(plain), true, nil
}
