package audit

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// readModel is the merchant's rows of the ledger read model together with
// the checkpoint they reflect.
type readModel struct {
	position eventstore.Position
	balances map[balanceKey]money.Amount
	txs      map[string]txRow
}

// loadReadModel reads the ledger checkpoint and the merchant's rows in one
// snapshot. The ledger projector writes its rows and its checkpoint in one
// transaction, so the rows are exactly the effect of the events up to the
// checkpoint, whatever a live runner does meanwhile. (Queries would read
// them outside that snapshot, hence the SQL here.) The transaction is kept
// short: an open snapshot holds back the event store's visibility horizon.
func loadReadModel(ctx context.Context, pool *pgxpool.Pool, merchantID string) (readModel, error) {
	rm := readModel{balances: map[balanceKey]money.Amount{}, txs: map[string]txRow{}}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var c, p int64
		err := tx.QueryRow(ctx, `SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = $1`,
			projections.Ledger{}.Name()).Scan(&c, &p)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // nothing projected (nor readable) yet
		}
		if err != nil {
			return err
		}
		// Positions are stored as their bit patterns.
		rm.position = eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}
		if rm.position == eventstore.Start {
			// A starting runner creates the row before the tables.
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT environment, holder, holder_id, bucket, balance FROM rm_balances WHERE merchant_id = $1`, merchantID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var env, holder, id, bucket string
			var v int64
			if err := rows.Scan(&env, &holder, &id, &bucket, &v); err != nil {
				rows.Close()
				return err
			}
			k := balanceKey{domain.Environment(env), ledger.Account{Holder: ledger.Holder(holder), ID: id, Bucket: ledger.Bucket(bucket)}}
			rm.balances[k] = money.Amount(v)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT id, environment, customer_id, reference, transaction_type, status, record::text, created_at
			FROM rm_transactions WHERE merchant_id = $1`, merchantID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, doc string
			var row txRow
			if err := rows.Scan(&id, &row.env, &row.customerID, &row.reference, &row.typ, &row.status, &doc, &row.createdAt); err != nil {
				return err
			}
			row.record = []byte(doc)
			rm.txs[id] = row
		}
		return rows.Err()
	})
	return rm, err
}

// compare reports every difference between the read model and the replay.
func (rm readModel) compare(r *replay) {
	rm.compareBalances(r)
	rm.compareRecords(r)
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

// compareRecords: every replayed record has its row, equal field by field
// (the record as the API serves it, and the columns the API filters on),
// and every row of the merchant has a replayed record.
func (rm readModel) compareRecords(r *replay) {
	for _, id := range r.order {
		st := r.records[id]
		want := st.final
		row, ok := rm.txs[id]
		if !ok {
			r.report(Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id,
				Expected: "a row (" + string(want.Status) + ")", Found: "no row"})
			continue
		}
		var got ledger.Record
		if err := json.Unmarshal(row.record, &got); err != nil {
			r.report(Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: "record",
				Expected: "a transaction record", Found: "unreadable JSON", Detail: err.Error()})
		} else if canon, err := json.Marshal(got); err == nil {
			for _, f := range fieldDiffs(st.canon, canon) {
				r.report(Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: f.name,
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
				r.report(Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: "column " + c.name,
					Expected: showText(c.want), Found: showText(c.got)})
			}
		}
		// timestamptz keeps microseconds.
		if d := row.createdAt.Sub(want.CreatedAt); d >= time.Microsecond || d <= -time.Microsecond {
			r.report(Difference{Check: CheckRecord, Environment: want.Environment, RecordID: id, Field: "column created_at",
				Expected: want.CreatedAt.UTC().Format(time.RFC3339Nano), Found: row.createdAt.UTC().Format(time.RFC3339Nano)})
		}
	}
	var extra []string
	for id := range rm.txs {
		if _, ok := r.records[id]; !ok {
			extra = append(extra, id)
		}
	}
	sort.Strings(extra)
	for _, id := range extra {
		row := rm.txs[id]
		r.report(Difference{Check: CheckRecord, Environment: domain.Environment(row.env), RecordID: id,
			Expected: "no row", Found: "a row (" + row.status + ")", Detail: "no such record in the event log"})
	}
}

func showText(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
