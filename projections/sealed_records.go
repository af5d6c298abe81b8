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

// personalFields are r's personal fields by their place (see
// ledger.Record.PersonalFields).
func personalFields(r *ledger.Record) (places []string, fields []*string) {
	paths, fields := r.PersonalFields()
	for _, p := range paths {
		places = append(places, recordPlace+p)
	}
	return places, fields
}

// keptRecord is r as rm_transactions keeps it: its JSON, the personal
// fields sealed with sealer (plain without one).
func keptRecord(ctx context.Context, sealer domain.Sealer, r ledger.Record) ([]byte, error) {
	if sealer != nil {
		places, fields := personalFields(&r)
		owner := r.DataOwner()
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
