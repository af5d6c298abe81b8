package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/eventstore"
)

// The merchant's transaction records grow with its history, so the
// replay keeps them in a temporary table of its own session, not in
// memory: for each page of events it reads the states of the records the
// page writes, folds the page into them and writes them back. Memory holds
// one page's records.
const recordsTable = `CREATE TEMP TABLE audit_records (
    id             text COLLATE "C" PRIMARY KEY, -- recordsByIDSQL
    ord            bigint NOT NULL,  -- first-seen order
    environment    text NOT NULL,
    canon          bytea NOT NULL,   -- the last version, canonical JSON
    settled        bytea,            -- the version that first settled
    settle_commit  bigint,
    settle_prepare bigint,
    changed        boolean NOT NULL, -- reported as changed after settling
    commission     text,             -- escrow ids charged, one a line
    -- the last version's columns of rm_transactions
    customer_id    text NOT NULL,
    reference      text NOT NULL,
    type           text NOT NULL,
    status         text NOT NULL,
    created_at     timestamptz NOT NULL
)`

// recordWrite is one version of a record an event writes.
type recordWrite struct {
	pos   eventstore.Position
	rec   ledger.Record
	canon []byte
}

// spilledRecord is what the table knows of a record before a page.
type spilledRecord struct {
	ord      int64
	isNew    bool
	env      domain.Environment
	canon    []byte
	final    ledger.Record
	settled  []byte
	settleAt *eventstore.Position
	changed  bool
}

// records is the replay's record table on conn.
type records struct {
	conn  *pgx.Conn
	next  int64 // the next first-seen order
	count int64 // distinct records
}

func newRecords(ctx context.Context, conn *pgx.Conn) (*records, error) {
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS pg_temp.audit_records`); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, recordsTable); err != nil {
		return nil, err
	}
	// A temporary table is never analyzed, and this one grows from empty
	// to every record of the merchant: a plan cached while it was small
	// (on this pooled connection, by an earlier audit) would make every
	// page read the whole table. Each statement is planned for the table
	// as it is.
	if _, err := conn.Exec(ctx, `SET plan_cache_mode TO force_custom_plan`); err != nil {
		return nil, err
	}
	return &records{conn: conn}, nil
}

// drop removes the table and the setting, so that the pooled connection is
// as it was.
func (rs *records) drop(ctx context.Context) error {
	_, err := rs.conn.Exec(ctx, `DROP TABLE IF EXISTS pg_temp.audit_records; RESET plan_cache_mode`)
	return err
}

// fold applies writes, in log order, to the stored records: a record is
// upserted whole by id, and a settled record must never change again
// (each change after settling reported once, as report receives it).
func (rs *records) fold(ctx context.Context, writes []recordWrite, report func(Difference)) error {
	if len(writes) == 0 {
		return nil
	}
	ids := make([]string, 0, len(writes))
	states := map[string]*spilledRecord{}
	for _, w := range writes {
		if _, ok := states[w.rec.ID]; !ok {
			states[w.rec.ID] = nil
			ids = append(ids, w.rec.ID)
		}
	}
	rows, err := rs.conn.Query(ctx, `SELECT id, ord, settled, settle_commit, settle_prepare, changed
		FROM audit_records WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id     string
			st     spilledRecord
			sc, sp *int64
		)
		if err := rows.Scan(&id, &st.ord, &st.settled, &sc, &sp, &st.changed); err != nil {
			rows.Close()
			return err
		}
		if sc != nil && sp != nil {
			st.settleAt = &eventstore.Position{Commit: uint64(*sc), Prepare: uint64(*sp)}
		}
		states[id] = &st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, w := range writes {
		st := states[w.rec.ID]
		if st == nil {
			st = &spilledRecord{ord: rs.next, isNew: true}
			rs.next++
			rs.count++
			states[w.rec.ID] = st
		}
		if st.settleAt != nil && !st.changed && !bytes.Equal(w.canon, st.settled) {
			st.changed = true
			for _, f := range fieldDiffs(st.settled, w.canon) {
				report(Difference{Check: CheckSettledOnce, Position: at(w.pos), RecordID: w.rec.ID, Field: f.name,
					Expected: f.want, Found: f.got, Detail: "settled at " + st.settleAt.String()})
			}
		}
		st.final, st.canon, st.env = w.rec, w.canon, w.rec.Environment
		if st.settleAt == nil && w.rec.Status.Settled() {
			st.settled, st.settleAt = w.canon, at(w.pos)
		}
	}
	n := len(ids)
	var (
		ords             = make([]int64, n)
		envs             = make([]string, n)
		canons, settleds = make([][]byte, n), make([][]byte, n)
		scs, sps         = make([]*int64, n), make([]*int64, n)
		changed          = make([]bool, n)
		commissions      = make([]*string, n)
		cids, refs       = make([]string, n), make([]string, n)
		types, statuses  = make([]string, n), make([]string, n)
		created          = make([]time.Time, n)
	)
	for i, id := range ids {
		st := states[id]
		ords[i], envs[i], canons[i], settleds[i], changed[i] = st.ord, string(st.env), st.canon, st.settled, st.changed
		if st.settleAt != nil {
			c, p := int64(st.settleAt.Commit), int64(st.settleAt.Prepare)
			scs[i], sps[i] = &c, &p
		}
		commissions[i] = charged(st.final)
		f := st.final
		cids[i], refs[i], types[i], statuses[i], created[i] = f.CustomerID, f.Reference, string(f.Type), string(f.Status), f.CreatedAt
	}
	_, err = rs.conn.Exec(ctx, `INSERT INTO audit_records AS r
		(id, ord, environment, canon, settled, settle_commit, settle_prepare, changed, commission,
		 customer_id, reference, type, status, created_at)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::bytea[], $6::bigint[], $7::bigint[], $8::boolean[], $9::text[],
		                     $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[])
		ON CONFLICT (id) DO UPDATE SET environment = excluded.environment, canon = excluded.canon,
		    settled = excluded.settled, settle_commit = excluded.settle_commit, settle_prepare = excluded.settle_prepare,
		    changed = excluded.changed, commission = excluded.commission, customer_id = excluded.customer_id,
		    reference = excluded.reference, type = excluded.type, status = excluded.status, created_at = excluded.created_at`,
		ids, ords, envs, canons, settleds, scs, sps, changed, commissions, cids, refs, types, statuses, created)
	return err
}

// recordsByIDSQL reads the replayed records in the byte order of their ids
// (the order Go compares strings in), which is the order of the table's
// primary key: its id is collated "C" so that the merge reads the index
// instead of sorting every record of the merchant.
const recordsByIDSQL = `SELECT id, ord, canon, environment, customer_id, reference, type, status, created_at
	FROM audit_records ORDER BY id COLLATE "C"`

// sameRow is the fast path of the comparison, for the rows that match:
// the record's bytes are those the replay gives (both are the record as
// encoding/json writes it), and so are the columns (the replay's
// created_at as PostgreSQL stores it). Anything else goes through
// compareRow, which says what differs.
func sameRow(row, mine txRow, canon []byte) bool {
	cid := ""
	if row.customerID != nil {
		cid = *row.customerID
	}
	return bytes.Equal(row.record, canon) && row.env == mine.env && cid == *mine.customerID &&
		row.reference == mine.reference && row.typ == mine.typ && row.status == mine.status && row.createdAt.Equal(mine.createdAt)
}

// charged lists the escrows a commission record charges (each once), or
// nil for any other record: a failed or reversed commission charged
// nothing.
func charged(rec ledger.Record) *string {
	if rec.Type != ledger.Commission || rec.EscrowDetails == nil || rec.Status == ledger.Failed || rec.Status == ledger.Reversed {
		return nil
	}
	var ids []string
	for _, id := range rec.EscrowDetails.EscrowIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	s := strings.Join(ids, "\n")
	return &s
}

// checkCommission: commission is charged at most once per escrow. Escrows
// are reported in the order of the first record charging them, the
// records in the order they were first seen.
func (rs *records) checkCommission(ctx context.Context, report func(Difference)) error {
	rows, err := rs.conn.Query(ctx, `SELECT environment, eid, array_agg(id ORDER BY ord)
		  FROM audit_records, unnest(string_to_array(commission, E'\n')) WITH ORDINALITY AS x(eid, k)
		 WHERE commission IS NOT NULL AND eid <> ''
		 GROUP BY environment, eid
		HAVING count(*) > 1
		 ORDER BY min(ord * 1000000 + k)`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			env, eid string
			ids      []string
		)
		if err := rows.Scan(&env, &eid, &ids); err != nil {
			return err
		}
		report(Difference{Check: CheckCommission, Environment: domain.Environment(env), EscrowID: eid,
			Expected: "1 commission record", Found: strconv.Itoa(len(ids)) + " (" + strings.Join(ids, ", ") + ")"})
	}
	return rows.Err()
}

// compareRecords: every replayed record has its row of rm_transactions,
// equal field by field (the record as the API serves it, and the columns
// the API filters on), and every row of the merchant has a replayed
// record. The rows come from snap (the read model's snapshot, see
// RunWith), the records from the table, both in id order, merged;
// differences are reported in the order the records were first seen,
// then the rows without a record by id.
func (rs *records) compareRecords(ctx context.Context, snap pgx.Tx, merchantID string, report func(Difference)) error {
	rowsRM, err := snap.Query(ctx, `SELECT id, environment, customer_id, reference, transaction_type, status, record::text, created_at
		FROM rm_transactions WHERE merchant_id = $1 ORDER BY id COLLATE "C"`, merchantID)
	if err != nil {
		return err
	}
	defer rowsRM.Close()
	rowsRec, err := rs.conn.Query(ctx, recordsByIDSQL)
	if err != nil {
		return err
	}
	defer rowsRec.Close()

	type keyed struct {
		ord   int64 // -1: a row without a record
		id    string
		diffs []Difference
	}
	var found []keyed
	var (
		rmID, recID   string
		row           txRow
		ord           int64
		canon         []byte
		mine          txRow // the record's columns as the replay has them
		rmOK, recOK   bool
		nextRM, nextR = true, true
	)
	for {
		if nextRM {
			rmOK, nextRM = rowsRM.Next(), false
			if rmOK {
				var doc string
				if err := rowsRM.Scan(&rmID, &row.env, &row.customerID, &row.reference, &row.typ, &row.status, &doc, &row.createdAt); err != nil {
					return err
				}
				row.record = []byte(doc)
			}
		}
		if nextR {
			recOK, nextR = rowsRec.Next(), false
			if recOK {
				var cid string
				if err := rowsRec.Scan(&recID, &ord, &canon, &mine.env, &cid, &mine.reference, &mine.typ, &mine.status, &mine.createdAt); err != nil {
					return err
				}
				mine.customerID = &cid
			}
		}
		if !rmOK && !recOK {
			break
		}
		switch {
		case recOK && (!rmOK || recID < rmID): // a record without its row
			var want ledger.Record
			if err := json.Unmarshal(canon, &want); err != nil {
				return fmt.Errorf("audit: record %s: %w", recID, err)
			}
			found = append(found, keyed{ord: ord, id: recID, diffs: []Difference{{Check: CheckRecord, Environment: want.Environment, RecordID: recID,
				Expected: "a row (" + string(want.Status) + ")", Found: "no row"}}})
			nextR = true
		case rmOK && (!recOK || rmID < recID): // a row without a record
			found = append(found, keyed{ord: -1, id: rmID, diffs: []Difference{{Check: CheckRecord, Environment: domain.Environment(row.env), RecordID: rmID,
				Expected: "no row", Found: "a row (" + row.status + ")", Detail: "no such record in the event log"}}})
			nextRM = true
		case sameRow(row, mine, canon):
			nextRM, nextR = true, true
		default:
			var want ledger.Record
			if err := json.Unmarshal(canon, &want); err != nil {
				return fmt.Errorf("audit: record %s: %w", recID, err)
			}
			if diffs := compareRow(recID, want, canon, row); len(diffs) > 0 {
				found = append(found, keyed{ord: ord, id: recID, diffs: diffs})
			}
			nextRM, nextR = true, true
		}
	}
	if err := rowsRM.Err(); err != nil {
		return err
	}
	if err := rowsRec.Err(); err != nil {
		return err
	}
	slices.SortStableFunc(found, func(a, b keyed) int {
		switch {
		case (a.ord < 0) != (b.ord < 0):
			if a.ord < 0 {
				return 1
			}
			return -1
		case a.ord >= 0:
			return cmp.Compare(a.ord, b.ord)
		default:
			return strings.Compare(a.id, b.id)
		}
	})
	for _, k := range found {
		for _, d := range k.diffs {
			report(d)
		}
	}
	return nil
}
