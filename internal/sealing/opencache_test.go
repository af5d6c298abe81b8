package sealing_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/sealing"
)

// countingKeys counts the values opened.
type countingKeys struct {
	*keyring.Keyring
	opens atomic.Int64
}

func (k *countingKeys) Open(ctx context.Context, s keyring.Subject, sealed, aad []byte) ([]byte, error) {
	k.opens.Add(1)
	return k.Keyring.Open(ctx, s, sealed, aad)
}

// countedStore is a sealing store over a new database, counting the values
// its keys open, with the log's head before anything was appended.
func countedStore(t *testing.T) (*postgres.Store, eventstore.Store, *countingKeys, eventstore.Position) {
	t.Helper()
	raw := postgres.New(pgtest.NewPool(t))
	keys := &countingKeys{Keyring: newKeyring(t, raw)}
	store := sealing.Wrap(raw, keys)
	t.Cleanup(store.Close)
	from, err := store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return raw, store, keys, from
}

// appendEvent appends one event of typ to a new stream.
func appendEvent(t *testing.T, store eventstore.Store, stream, typ, data string) {
	t.Helper()
	if _, err := store.Append(context.Background(), eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
		Events: []eventstore.EventData{event(typ, data)}}); err != nil {
		t.Fatal(err)
	}
}

// firstBatch subscribes from `from` and returns the first batch handed to
// the subscriber.
func firstBatch(t *testing.T, store eventstore.Store, from eventstore.Position) []eventstore.RecordedEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []eventstore.RecordedEvent
	err := store.Subscribe(ctx, from, func(_ context.Context, events []eventstore.RecordedEvent) error {
		got = events
		return errDone
	})
	if err != errDone {
		t.Fatal(err)
	}
	return got
}

// TestSubscribersOpenEachEventOnce: the subscribers of one process are
// handed the same events; the first to get an event another process
// appended opens its sealed values, and the others take what it opened.
func TestSubscribersOpenEachEventOnce(t *testing.T) {
	raw, store, keys, from := countedStore(t)
	appendEvent(t, sealing.Wrap(raw, keys), "customer-c_ada", "customer.created", customerCreated)
	sameJSON(t, firstBatch(t, store, from)[0].Data, customerCreated)
	once := keys.opens.Load()
	if once != 6 { // firstname, lastname, email, phone, bvn, dob
		t.Fatalf("%d values opened for one customer's creation, want 6", once)
	}
	for range 3 {
		sameJSON(t, firstBatch(t, store, from)[0].Data, customerCreated)
	}
	if got := keys.opens.Load(); got != once {
		t.Fatalf("three more subscribers opened %d values again", got-once)
	}
}

// TestOwnAppendsAreNotOpenedAgain: the subscribers of the process that
// appended an event are handed the data it was given, with nothing opened;
// but not when a value of it was written erased (its subject forgotten),
// which the log's copy no longer holds.
func TestOwnAppendsAreNotOpenedAgain(t *testing.T) {
	ctx := context.Background()
	_, store, keys, from := countedStore(t)
	appendEvent(t, store, "customer-c_ada", "customer.created", customerCreated)
	sameJSON(t, firstBatch(t, store, from)[0].Data, customerCreated)
	if got := keys.opens.Load(); got != 0 {
		t.Fatalf("%d values of the process's own append opened again", got)
	}

	if _, err := keys.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	from, err := store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	appendEvent(t, store, "charge-ch_1", "charge.applied", twoCustomersCharged)
	got := string(firstBatch(t, store, from)[0].Data)
	if strings.Contains(got, "Adaeze") || !strings.Contains(got, "[erased]") || !strings.Contains(got, "Bolanle") {
		t.Fatalf("a forgotten customer's values reached a subscriber: %s", got)
	}
}

// twoCustomersCharged names two customers, each in a record of their own.
const twoCustomersCharged = `{"merchantId":"m_1","customerId":"c_bola","records":[` +
	`{"id":"r_1","customerId":"c_ada","merchantId":"m_1","walletDetails":{"customerName":"Adaeze Obiageli","phone":"08031234567"}},` +
	`{"id":"r_2","customerId":"c_bola","merchantId":"m_1","walletDetails":{"customerName":"Bolanle Adeyemi","phone":"08037654321"}}]}`

// TestDestroyedKeyDropsWhatSubscribersOpened: once this process destroys a
// customer's key, no subscriber is handed their events as opened before.
func TestDestroyedKeyDropsWhatSubscribersOpened(t *testing.T) {
	ctx := context.Background()
	_, store, ring, from := countedStore(t)
	appendEvent(t, store, "customer-c_ada", "customer.created", customerCreated)
	sameJSON(t, firstBatch(t, store, from)[0].Data, customerCreated)
	if _, err := ring.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	got := firstBatch(t, store, from)[0].Data
	if strings.Contains(string(got), "ada@example.com") || !strings.Contains(string(got), "[erased]") {
		t.Fatalf("after the key's destruction a subscriber was handed %s", got)
	}
}
