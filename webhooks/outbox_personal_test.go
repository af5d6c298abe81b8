package webhooks

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/sealing"
)

// TestForgottenCustomersFieldsLeaveKeptDeliveries: a payment message about
// a customer keeps the personal fields of its record sealed with the
// customer's key inside the body the merchant's key seals. Until the
// customer is forgotten the body is sent exactly as made; after, the same
// delivery is sent with those fields erased and every other field (the
// money) as it was. A text in them that looks sealed goes as written.
func TestForgottenCustomersFieldsLeaveKeptDeliveries(t *testing.T) {
	ctx := context.Background()
	master, err := keyring.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	ring := keyring.New(pgtest.NewPool(t), master)
	sealer := sealing.NewValues(ring)
	amount, err := money.Parse("2500.50")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 3, 10, 4, 5, 0, time.UTC)
	record := func(customer, accountName string) ledger.Record {
		return ledger.Record{ID: "tx_" + customer, Reference: "ref-" + customer, Amount: amount, Currency: "NGN",
			Status: ledger.Success, Type: ledger.Withdrawal, CustomerID: customer, MerchantID: "m_1", Environment: domain.Test,
			WithdrawalDetails: &ledger.WithdrawalDetails{AccountName: accountName, AccountNumber: "0123456789", BankCode: "058", BankName: "GTBank"},
			CreatedAt:         at, UpdatedAt: at}
	}
	looksSealed := domain.SealedPrefix + "customer:c_bola:AAAA"
	msgs, err := PaymentMessages(ledger.Effect{Records: []ledger.Record{
		record("c_ada", "ADAEZE OBIAGELI"), record("c_bola", looksSealed), record("", "ACME STORES LTD")}}, at)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("%d messages, %v", len(msgs), err)
	}
	stored, err := sealBodies(ctx, sealer, msgs)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := sealer.Open(ctx, bodyPlace(msgs[0].ID), string(stored[0]))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(outer, "ADAEZE") || strings.Contains(outer, "0123456789") || !strings.Contains(outer, `"bankCode":"058"`) {
		t.Fatalf("the merchant's key alone opens the customer's fields: %s", outer)
	}
	// The field that only looks sealed is sealed like any other.
	if outer, err := sealer.Open(ctx, bodyPlace(msgs[1].ID), string(stored[1])); err != nil || strings.Contains(outer, looksSealed) {
		t.Fatalf("a text that looks sealed was kept as it is (%v): %s", err, outer)
	}
	for i, m := range msgs {
		if got, err := OpenBody(ctx, sealer, m.ID, stored[i]); err != nil || string(got) != string(m.Body) {
			t.Fatalf("message %d sent as %s (%v), want %s", i, got, err, m.Body)
		}
	}

	if _, err := ring.Destroy(ctx, keyring.Customer("c_ada")); err != nil {
		t.Fatal(err)
	}
	erased := strings.NewReplacer(`"ADAEZE OBIAGELI"`, `"[erased]"`, `"0123456789"`, `"[erased]"`).Replace(string(msgs[0].Body))
	if got, err := OpenBody(ctx, sealer, msgs[0].ID, stored[0]); err != nil || string(got) != erased {
		t.Fatalf("after the customer was forgotten, sent as %s (%v), want %s", got, err, erased)
	}
	for i := 1; i < 3; i++ {
		if got, err := OpenBody(ctx, sealer, msgs[i].ID, stored[i]); err != nil || string(got) != string(msgs[i].Body) {
			t.Fatalf("another customer's or the merchant's message %d sent as %s (%v)", i, got, err)
		}
	}
	// Made after the customer was forgotten, a message carries them erased.
	again, err := sealBodies(ctx, sealer, msgs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenBody(ctx, sealer, msgs[0].ID, again[0]); err != nil || string(got) != erased {
		t.Fatalf("a message made after the customer was forgotten sent as %s (%v)", got, err)
	}

	// A body an earlier version kept (sealed whole, nothing inside) is
	// sent as it is, a field that looks sealed included.
	earlier, err := sealer.Seal(ctx, domain.MerchantData("m_1"), earlierBodyPlace(msgs[1].ID), string(msgs[1].Body))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenBody(ctx, sealer, msgs[1].ID, []byte(earlier)); err != nil || string(got) != string(msgs[1].Body) {
		t.Fatalf("an earlier version's body sent as %s (%v)", got, err)
	}
	// A field sealed inside that cannot be opened now (the keys' database
	// away, say) fails the attempt: its sealed text is never sent.
	failing := failingInside{Sealer: sealer, place: personalPlace(msgs[1].ID, "withdrawalDetails.accountName")}
	if got, err := OpenBody(ctx, failing, msgs[1].ID, stored[1]); err == nil {
		t.Fatalf("a field that did not open was sent: %s", got)
	}
}

// failingInside fails to open the value kept at place.
type failingInside struct {
	domain.Sealer
	place string
}

func (f failingInside) Open(ctx context.Context, where, sealed string) (string, error) {
	if where == f.place {
		return "", errors.New("the keys could not be read")
	}
	return f.Sealer.Open(ctx, where, sealed)
}
