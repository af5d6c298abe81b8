package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
)

// TestReadTenantWaitsForOlderTransactions: ReadTenant keeps ReadAll's
// horizon. A tenant's event committed by a younger transaction is withheld
// while an older transaction that appended one of the tenant's events is
// open, so a reader paging with after never passes it and skips the older
// event when it commits.
func TestReadTenantWaitsForOlderTransactions(t *testing.T) {
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := "tenant-" + uuid.NewString()[:8]
	meta := fmt.Sprintf(`{"merchantId":%q,"environment":"test"}`, p)
	f := eventstore.TenantFilter{MerchantID: p, Environment: "test"}

	old, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(context.Background()) //nolint:errcheck
	oldID := uuid.New()
	if _, err := old.Exec(ctx,
		`SELECT tx FROM es_append($1, $2, $3, $4::uuid[], $5, $6::json[], $7::json[], $8, $9)`,
		[]string{p + "-old"}, []int64{-1}, []int32{1}, []string{oldID.String()},
		[]string{"Old"}, []string{`{"n":1}`}, []string{meta}, []int32{1}, []int32{0}); err != nil {
		t.Fatal(err)
	}
	newEv := eventstore.EventData{ID: uuid.New(), Type: "New", Data: []byte(`{"n":2}`), Metadata: []byte(meta)}
	if _, err := s.Append(ctx, eventstore.StreamAppend{Stream: p + "-new", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{newEv}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadTenant(ctx, f, eventstore.Start, 0, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("while the older transaction is open: %d events, %v", len(got), err)
	}
	if n, err := s.CountTenant(ctx, f); err != nil || n != 0 {
		t.Fatalf("count while the older transaction is open: %d %v", n, err)
	}
	if err := old.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Transactions of other tests on the server may hold the horizon a
	// little longer.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, err = s.ReadTenant(ctx, f, eventstore.Start, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != 2 || got[0].ID != oldID || got[1].ID != newEv.ID {
		t.Fatalf("after the commit: %+v", got)
	}
}
