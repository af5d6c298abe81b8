package audit

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
)

// txRow is one row of rm_transactions.
type txRow struct {
	env, reference, typ, status string
	customerID                  *string
	record                      []byte
	createdAt                   time.Time
}

// readModel is the merchant's balances in the ledger read model together
// with the checkpoint they reflect (its transaction records are compared
// in the same snapshot as the replay ends, see records.compareRecords).
type readModel struct {
	position eventstore.Position
	balances map[balanceKey]money.Amount
}

// loadReadModel reads the ledger checkpoint and the merchant's balances
// in snap, a repeatable-read snapshot: the ledger projector writes its
// rows and its checkpoint in one transaction, so the rows of the snapshot
// are exactly the effect of the events up to the checkpoint, whatever a
// live runner does meanwhile. (Queries would read them outside that
// snapshot, hence the SQL here.) The balances are one row per account.
func loadReadModel(ctx context.Context, snap pgx.Tx, merchantID string) (readModel, error) {
	rm := readModel{balances: map[balanceKey]money.Amount{}}
	var c, p int64
	err := snap.QueryRow(ctx, `SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = $1`,
		projections.Ledger{}.Name()).Scan(&c, &p)
	if errors.Is(err, pgx.ErrNoRows) {
		return rm, nil // nothing projected (nor readable) yet
	}
	if err != nil {
		return rm, err
	}
	// Positions are stored as their bit patterns.
	rm.position = eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}
	if rm.position == eventstore.Start {
		// A starting runner creates the row before the tables.
		return rm, nil
	}
	rows, err := snap.Query(ctx, `SELECT environment, holder, holder_id, bucket, balance FROM rm_balances WHERE merchant_id = $1`, merchantID)
	if err != nil {
		return rm, err
	}
	defer rows.Close()
	for rows.Next() {
		var env, holder, id, bucket string
		var v int64
		if err := rows.Scan(&env, &holder, &id, &bucket, &v); err != nil {
			return rm, err
		}
		k := balanceKey{domain.Environment(env), ledger.Account{Holder: ledger.Holder(holder), ID: id, Bucket: ledger.Bucket(bucket)}}
		rm.balances[k] = money.Amount(v)
	}
	return rm, rows.Err()
}

// compareBalances: every account's row equals its replayed balance; a
// missing row counts as zero, and so does a replayed account without one.
func (rm readModel) compareBalances(r *replay) {
	keys := make([]balanceKey, 0, len(r.balances))
	for k := range r.balances {
		keys = append(keys, k)
	}
	for k := range rm.balances {
		if _, ok := r.balances[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	for _, k := range keys {
		want, got := r.balances[k], rm.balances[k]
		if want != got {
			r.report(Difference{Check: CheckBalance, Environment: k.env, Account: k.acct.String(),
				Expected: want.String(), Found: got.String()})
		}
	}
}

// compareRow compares a record's row of rm_transactions with the record
// replayed (want, canon its canonical JSON).
func compareRow(id string, want ledger.Record, canon []byte, row txRow) []Difference {
	var out []Difference
	var got ledger.Record
	if err := json.Unmarshal(row.record, &got); err != nil {
		out = append(out, Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: "record",
			Expected: "a transaction record", Found: "unreadable JSON", Detail: err.Error()})
	} else if doc, err := json.Marshal(got); err == nil {
		for _, f := range fieldDiffs(canon, doc) {
			out = append(out, Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: f.name,
				Expected: f.want, Found: f.got})
		}
	}
	cid := ""
	if row.customerID != nil {
		cid = *row.customerID
	}
	for _, c := range []struct{ name, want, got string }{
		{"environment", string(want.Environment), row.env},
		{"customer_id", want.CustomerID, cid},
		{"reference", want.Reference, row.reference},
		{"transaction_type", string(want.Type), row.typ},
		{"status", string(want.Status), row.status},
	} {
		if c.want != c.got {
			out = append(out, Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: "column " + c.name,
				Expected: showText(c.want), Found: showText(c.got)})
		}
	}
	// timestamptz keeps microseconds.
	if d := row.createdAt.Sub(want.CreatedAt); d >= time.Microsecond || d <= -time.Microsecond {
		out = append(out, Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: "column created_at",
			Expected: want.CreatedAt.UTC().Format(time.RFC3339Nano), Found: row.createdAt.UTC().Format(time.RFC3339Nano)})
	}
	return out
}

func showText(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
