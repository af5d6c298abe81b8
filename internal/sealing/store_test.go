package sealing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/sealing"
)

func newKeyring(t *testing.T, store *postgres.Store) *keyring.Keyring { return newKeyringB(t, store) }

func newKeyringB(t testing.TB, store *postgres.Store) *keyring.Keyring {
	t.Helper()
	m, err := keyring.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	return keyring.New(store.Pool(), m)
}

func event(typ string, data string) eventstore.EventData {
	return eventstore.EventData{ID: uuid.New(), Type: typ, Data: []byte(data),
		Metadata: []byte(`{"merchantId":"m_1","environment":"test","occurredAt":"2026-01-02T03:04:05Z"}`)}
}

const (
	customerCreated = `{"customerId":"c_ada","merchantId":"m_1","environment":"test","firstname":"Adaeze","lastname":"Obiageli",` +
		`"email":"ada@example.com","phone":"08031234567","countryId":"NG","bvn":"22212345678","dob":"1990-01-02","createdAt":"2026-01-02T03:04:05Z"}`
	merchantCreated = `{"merchantId":"m_1","name":"Acme","country":"NG","signingSecrets":{"live":"whsec_live_1","test":"whsec_test_1"}}`
	payoutStarted   = `{"movement":{"merchantId":"m_1","environment":"test","postings":[{"from":{"holder":"customer","id":"c_ada","bucket":"available"},` +
		`"to":{"holder":"payout","id":"p_1","bucket":"pending"},"amount":"5000.00"}]},"record":{"id":"t_1","reference":"ref-1","amount":"5000.00",` +
		`"customerId":"c_ada","merchantId":"m_1","withdrawalDetails":{"accountName":"ADAEZE OBIAGELI","accountNumber":"0123456789","bankCode":"058"}},"leaseHolder":"w1"}`
)

var personal = []string{"Adaeze", "Obiageli", "ada@example.com", "08031234567", "22212345678", "1990-01-02", "whsec_live_1", "whsec_test_1", "ADAEZE OBIAGELI", "0123456789"}

func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("read back\n%s\nwant\n%s", gb, wb)
	}
}

// TestStoreSealsDeclaredFieldsAndErasesWithTheKey: appended through the
// codec, the log holds none of the personal or secret values, and keeps
// amounts and references plain; read through it, the events are as
// appended; once the customer's key is destroyed their fields read
// "[erased]" while the merchant's secrets still open.
func TestStoreSealsDeclaredFieldsAndErasesWithTheKey(t *testing.T) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(t))
	ring := newKeyring(t, raw)
	store := sealing.Wrap(raw, ring)
	t.Cleanup(store.Close)
	if _, err := store.Append(ctx,
		eventstore.StreamAppend{Stream: "customer-c_ada", Expected: eventstore.NoStream, Events: []eventstore.EventData{event("customer.created", customerCreated)}},
		eventstore.StreamAppend{Stream: "merchant-m_1", Expected: eventstore.NoStream, Events: []eventstore.EventData{event("merchant.created", merchantCreated)}},
		eventstore.StreamAppend{Stream: "payment-p_1", Expected: eventstore.NoStream, Events: []eventstore.EventData{event("payment.payout_started", payoutStarted)}},
	); err != nil {
		t.Fatal(err)
	}
	stored, err := raw.ReadAll(ctx, eventstore.Start, 100)
	if err != nil || len(stored) != 3 {
		t.Fatalf("%d events, %v", len(stored), err)
	}
	for _, e := range stored {
		for _, p := range personal {
			if bytes.Contains(e.Data, []byte(p)) {
				t.Errorf("%s holds %q in plain text: %s", e.Type, p, e.Data)
			}
		}
		if !sealing.Sealed(e.Data) {
			t.Errorf("%s has no sealed value: %s", e.Type, e.Data)
		}
	}
	for _, plain := range []string{`"amount":"5000.00"`, `"reference":"ref-1"`, `"bankCode":"058"`, `"countryId":"NG"`} {
		found := false
		for _, e := range stored {
			found = found || bytes.Contains(e.Data, []byte(plain))
		}
		if !found {
			t.Errorf("%s is not plain in the log", plain)
		}
	}
	read, err := store.ReadAll(ctx, eventstore.Start, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"customer.created": customerCreated, "merchant.created": merchantCreated, "payment.payout_started": payoutStarted}
	for _, e := range read {
		sameJSON(t, e.Data, want[e.Type])
	}
	if _, err := ring.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	erased := map[string]string{
		"customer.created":       strings.NewReplacer(`"Adaeze"`, `"[erased]"`, `"Obiageli"`, `"[erased]"`, `"ada@example.com"`, `"[erased]"`, `"08031234567"`, `"[erased]"`, `"22212345678"`, `"[erased]"`, `"1990-01-02"`, `"[erased]"`).Replace(customerCreated),
		"merchant.created":       merchantCreated,
		"payment.payout_started": strings.NewReplacer(`"ADAEZE OBIAGELI"`, `"[erased]"`, `"0123456789"`, `"[erased]"`).Replace(payoutStarted),
	}
	own, err := store.ReadStream(ctx, "customer-c_ada", 0, 10)
	if err != nil || len(own) != 1 {
		t.Fatalf("%d events, %v", len(own), err)
	}
	for _, e := range own {
		sameJSON(t, e.Data, erased[e.Type])
	}
	var n int
	err = store.Subscribe(ctx, eventstore.Start, func(_ context.Context, events []eventstore.RecordedEvent) error {
		for _, e := range events {
			sameJSON(t, e.Data, erased[e.Type])
			n++
		}
		if n == 3 {
			return errDone
		}
		return nil
	})
	if err != errDone {
		t.Fatal(err)
	}
	tenant, err := eventstore.ReadTenant(ctx, store, eventstore.TenantFilter{MerchantID: "m_1", Environment: "test"}, eventstore.Start, 0, 10)
	if err != nil || len(tenant) != 3 {
		t.Fatalf("tenant read: %d %v", len(tenant), err)
	}
	for _, e := range tenant {
		sameJSON(t, e.Data, erased[e.Type])
	}
}

var errDone = errorString("done")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestSealedValueOpensOnlyInItsField: a sealed value copied into another
// field (or another event type) of the log does not open there.
func TestSealedValueOpensOnlyInItsField(t *testing.T) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(t))
	t.Cleanup(raw.Close)
	ring := newKeyring(t, raw)
	sealed, err := sealing.SealEvent(ctx, ring, "customer-c_ada", "customer.created", []byte(customerCreated), nil)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(sealed, &fields); err != nil {
		t.Fatal(err)
	}
	// The email's sealed value in the firstname's place.
	fields["firstname"] = fields["email"]
	moved, _ := json.Marshal(fields)
	store := sealing.Wrap(raw, ring)
	if _, err := raw.Append(ctx, eventstore.StreamAppend{Stream: "customer-c_ada", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "customer.created", Data: moved}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ReadStream(ctx, "customer-c_ada", 0, 10); err == nil || !strings.Contains(err.Error(), "firstname") {
		t.Fatalf("a sealed value moved to another field opened: %v", err)
	}
}

// TestTextThatLooksSealedIsKeptAsWritten: any text may start as a sealed
// value does. In a sealed field it is sealed like any other value (also by
// events seal, which leaves alone only what opens); in a plain field it is
// left as it is. Either way it reads back as written, and the stream stays
// readable.
func TestTextThatLooksSealedIsKeptAsWritten(t *testing.T) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(t))
	t.Cleanup(raw.Close)
	ring := newKeyring(t, raw)
	store := sealing.Wrap(raw, ring)
	looks := strings.NewReplacer(`"firstname":"Adaeze"`, `"firstname":"`+sealing.Prefix+`Adaeze"`,
		`"countryId":"NG"`, `"countryId":"`+sealing.Prefix+`customer:c_ada:AAAA"`).Replace(customerCreated)
	if _, err := store.Append(ctx, eventstore.StreamAppend{Stream: "customer-c_ada", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{event("customer.created", looks)}}); err != nil {
		t.Fatal(err)
	}
	stored, err := raw.ReadStream(ctx, "customer-c_ada", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored[0].Data, []byte(sealing.Prefix+"Adaeze")) {
		t.Fatalf("a sealed field that looked sealed was stored as written: %s", stored[0].Data)
	}
	back, err := store.ReadStream(ctx, "customer-c_ada", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, back[0].Data, looks)

	// events seal over a plain event that holds such text.
	resealed, err := sealing.SealEvent(ctx, ring, "customer-c_ada", "customer.created", []byte(looks), nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(resealed, []byte(sealing.Prefix+"Adaeze")) || bytes.Contains(resealed, []byte("ada@example.com")) {
		t.Fatalf("events seal left text that looked sealed plain: %s", resealed)
	}
	if again, err := sealing.SealEvent(ctx, ring, "customer-c_ada", "customer.created", resealed, nil); err != nil || !bytes.Equal(again, resealed) {
		t.Fatalf("events seal rewrote what it had sealed (%v):\n%s\n%s", err, again, resealed)
	}
	opened, err := sealing.OpenEvent(ctx, ring, "customer.created", resealed)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, opened, looks)
}

// TestSnapshotsAreSealed: a snapshot written through the codec is sealed in
// the store, reads back as written, and a customer's no longer reads once
// their key is destroyed (the stream is replayed instead).
func TestSnapshotsAreSealed(t *testing.T) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(t))
	t.Cleanup(raw.Close)
	ring := newKeyring(t, raw)
	store := sealing.Wrap(raw, ring).(eventstore.SnapshotStore)
	state := []byte(`{"format":"customer/1","state":{"Email":"ada@example.com","BVN":"22212345678"}}`)
	for _, stream := range []string{"customer-c_ada", "escrow-e_1"} {
		if _, err := raw.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
			Events: []eventstore.EventData{{ID: uuid.New(), Type: "x", Data: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
		if err := store.WriteSnapshot(ctx, eventstore.Snapshot{Stream: stream, Revision: 0, Data: state}); err != nil {
			t.Fatal(err)
		}
		kept, ok, err := raw.ReadSnapshot(ctx, stream)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", stream, ok, err)
		}
		if bytes.Contains(kept.Data, []byte("ada@example.com")) || bytes.Contains(kept.Data, []byte("22212345678")) || !sealing.Sealed(kept.Data) {
			t.Fatalf("%s: stored snapshot is not sealed: %s", stream, kept.Data)
		}
		got, ok, err := store.ReadSnapshot(ctx, stream)
		if err != nil || !ok || !bytes.Equal(got.Data, state) {
			t.Fatalf("%s: read back %s %v %v", stream, got.Data, ok, err)
		}
	}
	// A plain snapshot (from before sealing) is not used.
	if err := raw.WriteSnapshot(ctx, eventstore.Snapshot{Stream: "escrow-e_1", Revision: 1, Data: state}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.ReadSnapshot(ctx, "escrow-e_1"); ok || err != nil {
		t.Fatalf("a plain snapshot was used: %v %v", ok, err)
	}
	if _, err := ring.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.ReadSnapshot(ctx, "customer-c_ada"); ok || err != nil {
		t.Fatalf("an erased customer's snapshot was used: %v %v", ok, err)
	}
}

// TestAppendForAForgottenSubjectKeepsNoPersonalData: an event naming a
// customer whose key is destroyed is still appended (their money moves),
// its personal fields stored as "[erased]".
func TestAppendForAForgottenSubjectKeepsNoPersonalData(t *testing.T) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(t))
	t.Cleanup(raw.Close)
	ring := newKeyring(t, raw)
	if _, err := ring.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	store := sealing.Wrap(raw, ring)
	if _, err := store.Append(ctx, eventstore.StreamAppend{Stream: "payment-p_1", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{event("payment.payout_started", payoutStarted)}}); err != nil {
		t.Fatal(err)
	}
	stored, err := raw.ReadStream(ctx, "payment-p_1", 0, 10)
	if err != nil || len(stored) != 1 {
		t.Fatalf("%d events, %v", len(stored), err)
	}
	sameJSON(t, stored[0].Data, strings.NewReplacer(`"ADAEZE OBIAGELI"`, `"[erased]"`, `"0123456789"`, `"[erased]"`).Replace(payoutStarted))
}

// sharedLog hands every reader the same slice of events, as the PostgreSQL
// store's subscribers share one read of the log.
type sharedLog struct {
	eventstore.Store
	events []eventstore.RecordedEvent
}

func (l sharedLog) ReadAll(context.Context, eventstore.Position, int) ([]eventstore.RecordedEvent, error) {
	return l.events, nil
}

// TestOpeningLeavesTheSharedEventsSealed: opening what a reader gets never
// writes into the events the inner store handed it, which other readers
// hold too (under -race, writing into them is a data race between the
// projectors).
func TestOpeningLeavesTheSharedEventsSealed(t *testing.T) {
	ctx := context.Background()
	raw := postgres.New(pgtest.NewPool(t))
	t.Cleanup(raw.Close)
	ring := newKeyring(t, raw)
	data, err := sealing.SealEvent(ctx, ring, "customer-c_ada", "customer.created", []byte(customerCreated), event("customer.created", "").Metadata)
	if err != nil {
		t.Fatal(err)
	}
	shared := []eventstore.RecordedEvent{{Type: "customer.created", Data: data}}
	store := sealing.Wrap(sharedLog{events: shared}, ring)
	for range 2 {
		got, err := store.ReadAll(ctx, eventstore.Start, 10)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, got[0].Data, customerCreated)
	}
	if !bytes.Equal(shared[0].Data, data) {
		t.Fatalf("the shared event was rewritten: %s", shared[0].Data)
	}
}

// TestSubscribersOpenTheirOwnCopies: subscribers near the log's end share
// the store's tail; opening one's events leaves the tail as stored, so
// another subscriber (here one of the store beneath) still reads them
// sealed, and two subscribers opening at once (under -race) race on
// nothing.
func TestSubscribersOpenTheirOwnCopies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := postgres.New(pgtest.NewPool(t))
	store := sealing.Wrap(raw, newKeyring(t, raw))
	t.Cleanup(store.Close)
	from, err := store.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 2)
	for range 2 {
		go func() {
			opened <- store.Subscribe(ctx, from, func(_ context.Context, events []eventstore.RecordedEvent) error {
				sameJSON(t, events[0].Data, customerCreated)
				return errDone
			})
		}()
	}
	if _, err := store.Append(ctx, eventstore.StreamAppend{Stream: "customer-c_ada", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{event("customer.created", customerCreated)}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-opened; err != errDone {
			t.Fatal(err)
		}
	}
	err = raw.Subscribe(ctx, from, func(_ context.Context, events []eventstore.RecordedEvent) error {
		if !sealing.Sealed(events[0].Data) || bytes.Contains(events[0].Data, []byte("ada@example.com")) {
			t.Errorf("the shared tail holds the event opened: %s", events[0].Data)
		}
		return errDone
	})
	if err != errDone {
		t.Fatal(err)
	}
}
