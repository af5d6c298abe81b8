package projections

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
)

// A transaction record's personal fields (the people it names, their
// accounts and addresses: the fields its events seal) are kept sealed in
// rm_transactions.record with the key of the record's customer, or of the
// merchant for the merchant's own records; the rest of the record stays
// plain JSON, as encoding/json writes it.

const recordPlace = "rm_transactions.record."

// personalFields are r's personal fields by their place; r's details are
// copied first, so the fields can be changed without touching the record
// r was copied from.
func personalFields(r *ledger.Record) (places []string, fields []*string) {
	add := func(path string, f *string) {
		places, fields = append(places, recordPlace+path), append(fields, f)
	}
	if d := r.WithdrawalDetails; d != nil {
		c := *d
		r.WithdrawalDetails = &c
		add("withdrawalDetails.accountName", &c.AccountName)
		add("withdrawalDetails.accountNumber", &c.AccountNumber)
	}
	if d := r.WalletDetails; d != nil {
		c := *d
		r.WalletDetails = &c
		add("walletDetails.phone", &c.Phone)
		add("walletDetails.customerName", &c.CustomerName)
	}
	if d := r.BlockchainDetails; d != nil {
		c := *d
		r.BlockchainDetails = &c
		add("blockchainDetails.toAddress", &c.ToAddress)
	}
	if d := r.EscrowDetails; d != nil {
		c := *d
		r.EscrowDetails = &c
		if b := c.Beneficiary; b != nil {
			cb := *b
			c.Beneficiary = &cb
			add("escrowDetails.beneficiary.name", &cb.Name)
			add("escrowDetails.beneficiary.phone", &cb.Phone)
		}
		if len(c.Escrows) > 0 {
			c.Escrows = append([]ledger.EscrowSummary(nil), c.Escrows...)
			for i := range c.Escrows {
				if b := c.Escrows[i].Beneficiary; b != nil {
					cb := *b
					c.Escrows[i].Beneficiary = &cb
					add("escrowDetails.escrows.beneficiary.name", &cb.Name)
					add("escrowDetails.escrows.beneficiary.phone", &cb.Phone)
				}
			}
		}
	}
	return places, fields
}

// recordOwner is whose key seals r's personal fields.
func recordOwner(r ledger.Record) domain.DataOwner {
	if r.CustomerID != "" {
		return domain.CustomerData(r.CustomerID)
	}
	return domain.MerchantData(r.MerchantID)
}

// keptRecord is r as rm_transactions keeps it: its JSON, the personal
// fields sealed with sealer (plain without one).
func keptRecord(ctx context.Context, sealer domain.Sealer, r ledger.Record) ([]byte, error) {
	if sealer != nil {
		places, fields := personalFields(&r)
		owner := recordOwner(r)
		for i, f := range fields {
			sealed, err := sealFor(ctx, sealer, owner, places[i], *f)
			if err != nil {
				return nil, fmt.Errorf("projections: sealing %s of record %s: %w", places[i], r.ID, err)
			}
			*f = sealed
		}
	}
	return json.Marshal(r)
}

var quotedSealedPrefix = []byte(`"` + domain.SealedPrefix)

// OpenRecord is a record's JSON as rm_transactions keeps it, opened: the
// record as written (encoding/json writes a record one way, so the bytes
// are those of the record before sealing), its personal fields
// domain.Erased when their owner's key was destroyed.
func (q *Queries) OpenRecord(ctx context.Context, doc []byte) ([]byte, error) {
	if !bytes.Contains(doc, quotedSealedPrefix) {
		return doc, nil
	}
	var r ledger.Record
	if err := json.Unmarshal(doc, &r); err != nil {
		return nil, err
	}
	if err := q.openRecordFields(ctx, &r); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// openRecordFields opens in place the personal fields of r, read from
// rm_transactions.
func (q *Queries) openRecordFields(ctx context.Context, r *ledger.Record) error {
	places, fields := personalFields(r)
	return q.openAll(ctx, places, fields...)
}
