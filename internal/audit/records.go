package audit

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/hold"
)

// The merchant's transaction records grow with its history, so the
// replay does not keep them all in memory: it holds those still changing
// (recordHold, see package hold) and writes each to a temporary table of
// its own session once it has stopped, reading a record back from the
// table when the log changes it again later.
const recordsTable = `CREATE TEMP TABLE audit_records (
    id             text COLLATE "C" PRIMARY KEY, -- recordDigestsSQL
    ord            bigint NOT NULL,  -- first-seen order
    environment    text NOT NULL,
    canon          bytea NOT NULL,   -- the last version, canonical JSON
    settled        bytea,            -- the version that first settled, if not canon (recordValues)
    settle_commit  bigint,
    settle_prepare bigint,
    changed        boolean NOT NULL, -- reported as changed after settling
    commission     text,             -- escrow ids charged, one a line
    digest         bytea NOT NULL    -- of the last version (recordDigest)
)`

// recordWrite is one version of a record an event writes.
type recordWrite struct {
	pos   eventstore.Position
	rec   ledger.Record
	canon []byte
}

// spilledRecord is what the replay knows of a record.
type spilledRecord struct {
	ord      int64
	env      domain.Environment
	canon    []byte
	final    ledger.Record
	settled  []byte
	settleAt *eventstore.Position
	changed  bool
}

// recordHold is how many records the replay holds (hold.Rows): a few
// megabytes. A variable for the tests.
var recordHold = 8192

// records is the replay's record table on conn.
type records struct {
	conn *pgx.Conn
	// open opens a row's record as rm_transactions keeps it (its
	// personal fields sealed) into the record as written.
	open  func(ctx context.Context, doc []byte) ([]byte, error)
	held  *hold.Rows[spilledRecord]
	next  int64 // the next first-seen order
	count int64 // distinct records
	// charging: some record was written charging commission (the only
	// rows checkCommission looks at).
	charging bool
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
	// as it is. Without statistics the planner also takes the table for
	// millions of rows and compiles the statements over it with JIT: at
	// 373,760 records that was 0.2 s of the commission check's 0.7, and no
	// statement here runs long enough to repay it.
	if _, err := conn.Exec(ctx, `SET plan_cache_mode TO force_custom_plan; SET jit TO off`); err != nil {
		return nil, err
	}
	return &records{conn: conn, open: func(_ context.Context, doc []byte) ([]byte, error) { return doc, nil },
		held: hold.New[spilledRecord](recordHold)}, nil
}

// drop removes the table and the settings, so that the pooled connection
// is as it was.
func (rs *records) drop(ctx context.Context) error {
	_, err := rs.conn.Exec(ctx, `DROP TABLE IF EXISTS pg_temp.audit_records; RESET plan_cache_mode; RESET jit`)
	return err
}

// fold applies writes, in log order, to the records: a record is replaced
// whole by id, and a settled record must never change again (each change
// after settling reported once, as report receives it).
func (rs *records) fold(ctx context.Context, writes []recordWrite, report func(Difference)) error {
	if len(writes) == 0 {
		return nil
	}
	ids := make([]string, len(writes))
	for i, w := range writes {
		ids[i] = w.rec.ID
	}
	if again := rs.held.Missing(ids); len(again) > 0 {
		if err := rs.readBack(ctx, again); err != nil {
			return err
		}
	}
	for _, w := range writes {
		r := rs.held.Get(w.rec.ID)
		if r == nil {
			r = rs.held.Add(w.rec.ID, spilledRecord{ord: rs.next}, false)
			rs.next++
			rs.count++
		}
		st := &r.V
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
	return rs.write(ctx, false)
}

// readBack holds again the records of ids that the table has (a record
// not in it is new).
func (rs *records) readBack(ctx context.Context, ids []string) error {
	rows, err := rs.conn.Query(ctx, `SELECT id, ord, CASE WHEN settle_commit IS NOT NULL THEN coalesce(settled, canon) END,
		    settle_commit, settle_prepare, changed
		FROM audit_records WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     string
			st     spilledRecord
			sc, sp *int64
		)
		if err := rows.Scan(&id, &st.ord, &st.settled, &sc, &sp, &st.changed); err != nil {
			return err
		}
		if sc != nil && sp != nil {
			st.settleAt = &eventstore.Position{Commit: uint64(*sc), Prepare: uint64(*sp)}
		}
		rs.held.Add(id, st, true)
	}
	return rows.Err()
}

// finish writes every record still held, once the replay is over.
func (rs *records) finish(ctx context.Context) error { return rs.write(ctx, true) }

// recordColumns are the columns of audit_records a record is written
// with, in recordValues' order.
var recordColumns = []string{"id", "ord", "environment", "canon", "settled", "settle_commit", "settle_prepare", "changed",
	"commission", "digest"}

// recordValues is the row of a record, in recordColumns. The version that
// settled is written only when the last version differs from it: a record
// that settles stops changing, so most settled rows would hold the same
// bytes twice (readBack reads canon for a settled row without them).
func recordValues(id string, st spilledRecord) []any {
	var sc, sp *int64
	settled := st.settled
	if st.settleAt != nil {
		c, p := int64(st.settleAt.Commit), int64(st.settleAt.Prepare)
		sc, sp = &c, &p
		if bytes.Equal(settled, st.canon) {
			settled = nil
		}
	}
	return []any{id, st.ord, string(st.env), st.canon, settled, sc, sp, st.changed, charged(st.final),
		recordDigest(st.canon, st.final)}
}

// write writes the records due (hold.Rows.Due): new ones with COPY, those
// read back in place.
func (rs *records) write(ctx context.Context, all bool) error {
	fresh, stored := rs.held.Due(all)
	if len(fresh) > 0 {
		rows := make([][]any, len(fresh))
		for i, r := range fresh {
			rows[i] = recordValues(r.ID, r.V)
			rs.charging = rs.charging || rows[i][8].(*string) != nil
		}
		if _, err := rs.conn.CopyFrom(ctx, pgx.Identifier{"audit_records"}, recordColumns, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
	}
	if len(stored) == 0 {
		return nil
	}
	n := len(stored)
	var (
		ids, envs                 = make([]string, n), make([]string, n)
		canons, settleds, digests = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		scs, sps                  = make([]*int64, n), make([]*int64, n)
		changed                   = make([]bool, n)
		commissions               = make([]*string, n)
	)
	for i, r := range stored {
		v := recordValues(r.ID, r.V)
		ids[i], envs[i], canons[i], settleds[i], scs[i], sps[i] = v[0].(string), v[2].(string), v[3].([]byte), v[4].([]byte), v[5].(*int64), v[6].(*int64)
		changed[i], commissions[i], digests[i] = v[7].(bool), v[8].(*string), v[9].([]byte)
		rs.charging = rs.charging || commissions[i] != nil
	}
	_, err := rs.conn.Exec(ctx, `UPDATE audit_records r SET environment = x.environment, canon = x.canon,
		    settled = x.settled, settle_commit = x.settle_commit, settle_prepare = x.settle_prepare,
		    changed = x.changed, commission = x.commission, digest = x.digest
		FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::bigint[], $6::bigint[], $7::boolean[], $8::text[], $9::bytea[])
		      AS x(id, environment, canon, settled, settle_commit, settle_prepare, changed, commission, digest)) x
		WHERE r.id = x.id`,
		ids, envs, canons, settleds, scs, sps, changed, commissions, digests)
	return err
}

// rowDigest is the SHA-256 of what the comparison holds equal in a row of
// rm_transactions and the record the replay gives for it: the record's
// bytes (both are the record as encoding/json writes it) and the columns
// the API filters on (created_at as PostgreSQL stores it), each field
// ended by a zero byte, which none of them can hold (PostgreSQL's text
// cannot, and JSON writes it escaped). PostgreSQL computes it for the rows
// (rmDigestsSQL), recordDigest in Go for the records as they are written:
// the two must digest the same fields in the same order.
func rowDigest(record, env, customer, reference, typ, status, created string) string {
	parts := []string{record}
	for _, text := range []string{env, customer, reference, typ, status} {
		parts = append(parts, `convert_to(`+text+`, 'UTF8')`)
	}
	return `sha256(` + strings.Join(parts, ` || '\x00'::bytea || `) + ` || '\x00'::bytea || timestamptz_send(` + created + `))`
}

// rmDigestsSQL reads the merchant's rows of rm_transactions as their ids
// and digests, in the byte order of the ids (the order Go compares
// strings in); only the ids and digests are sorted and sent. A row whose
// record holds sealed values has no digest (their bytes are not the
// record's): its record and columns are sent instead, for rowDigestOf
// once the record is opened.
var rmDigestsSQL = `WITH r AS (SELECT *, strpos(record::text, '"` + domain.SealedPrefix + `') > 0 AS sealed
	FROM rm_transactions WHERE merchant_id = $1)
	SELECT id, CASE WHEN NOT sealed THEN ` + rowDigest(`convert_to(record::text, 'UTF8')`, `environment`, `coalesce(customer_id, '')`,
	`reference`, `transaction_type`, `status`, `created_at`) + ` END,
	CASE WHEN sealed THEN record::text END, environment, coalesce(customer_id, ''), reference, transaction_type, status, created_at
	FROM r ORDER BY id COLLATE "C"`

// y2k is PostgreSQL's epoch, 2000-01-01 UTC, in microseconds since Unix's.
const y2k = 946_684_800_000_000

// recordDigest is rowDigest of the row a record's last version must have:
// canon, then the columns the ledger projector writes from it. created_at
// is timestamptz_send's: the big-endian microseconds since 2000-01-01 UTC
// that pgx, which writes the row, sends for the record's time (the
// nanoseconds under a microsecond dropped).
func recordDigest(canon []byte, rec ledger.Record) []byte {
	return rowDigestOf(canon, string(rec.Environment), rec.CustomerID, rec.Reference, string(rec.Type), string(rec.Status), rec.CreatedAt)
}

// rowDigestOf is rowDigest in Go, of a record's bytes and its row's
// columns.
func rowDigestOf(record []byte, env, customer, reference, typ, status string, created time.Time) []byte {
	h := sha256.New()
	h.Write(record)
	for _, text := range []string{env, customer, reference, typ, status} {
		h.Write([]byte{0})
		io.WriteString(h, text)
	}
	h.Write([]byte{0})
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(created.Unix()*1_000_000+int64(created.Nanosecond())/1_000-y2k)))
	return h.Sum(nil)
}

// recordDigestsSQL reads the replayed records as their ids and digests in
// the same order, which is the order of the table's primary key: its id is
// collated "C" so that the merge reads the index instead of sorting every
// record of the merchant.
const recordDigestsSQL = `SELECT id, digest FROM audit_records ORDER BY id COLLATE "C"`

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
	if !rs.charging {
		return nil // no row to look at: not worth a scan of every record
	}
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
// RunWith), the records from the table. Both are read as ids and digests
// (rowDigest) in id order and merged; only the ids whose digests differ,
// or that one side lacks, are read again whole and compared (differing).
// Differences are reported in the order the records were first seen, then
// the rows without a record by id.
func (rs *records) compareRecords(ctx context.Context, snap pgx.Tx, merchantID string, report func(Difference)) error {
	rowsRM, err := snap.Query(ctx, rmDigestsSQL, merchantID)
	if err != nil {
		return err
	}
	defer rowsRM.Close()
	rowsRec, err := rs.conn.Query(ctx, recordDigestsSQL)
	if err != nil {
		return err
	}
	defer rowsRec.Close()

	var (
		rmID, recID         string
		rmDigest, recDigest []byte
		rmOK, recOK         bool
		nextRM, nextR       = true, true
		differing           []string // ids of a row, a record, or both that are not equal
	)
	for {
		if nextRM {
			if rmOK, nextRM = rowsRM.Next(), false; rmOK {
				var (
					sealed                          *string
					env, customer, ref, typ, status string
					created                         time.Time
				)
				if err := rowsRM.Scan(&rmID, &rmDigest, &sealed, &env, &customer, &ref, &typ, &status, &created); err != nil {
					return err
				}
				if sealed != nil {
					doc, err := rs.open(ctx, []byte(*sealed))
					if err != nil {
						return fmt.Errorf("audit: record %s: %w", rmID, err)
					}
					rmDigest = rowDigestOf(doc, env, customer, ref, typ, status, created)
				}
			}
		}
		if nextR {
			if recOK, nextR = rowsRec.Next(), false; recOK {
				if err := rowsRec.Scan(&recID, &recDigest); err != nil {
					return err
				}
			}
		}
		switch {
		case !rmOK && !recOK:
		case recOK && (!rmOK || recID < rmID):
			differing, nextR = append(differing, recID), true
			continue
		case rmOK && (!recOK || rmID < recID):
			differing, nextRM = append(differing, rmID), true
			continue
		default:
			if !bytes.Equal(rmDigest, recDigest) {
				differing = append(differing, recID)
			}
			nextRM, nextR = true, true
			continue
		}
		break
	}
	if err := rowsRM.Err(); err != nil {
		return err
	}
	if err := rowsRec.Err(); err != nil {
		return err
	}
	rowsRM.Close()
	rowsRec.Close()
	comparedInFull(differing)
	return rs.differing(ctx, snap, merchantID, differing, report)
}

// comparedInFull sees the ids compareRecords compares in full (a hook
// for the tests: on a clean read model there are none).
var comparedInFull = func([]string) {}

// differingPage is how many ids differing reads at a time.
const differingPage = 1000

// differing compares in full the rows and records of ids (in id order,
// each lacking one side or not equal to it) and reports what differs.
func (rs *records) differing(ctx context.Context, snap pgx.Tx, merchantID string, ids []string, report func(Difference)) error {
	type keyed struct {
		ord   int64 // -1: a row without a record
		id    string
		diffs []Difference
	}
	var found []keyed
	for page := range slices.Chunk(ids, differingPage) {
		rows := map[string]txRow{}
		rmRows, err := snap.Query(ctx, `SELECT id, environment, customer_id, reference, transaction_type, status, record::text, created_at
			FROM rm_transactions WHERE merchant_id = $1 AND id = ANY ($2)`, merchantID, page)
		if err != nil {
			return err
		}
		for rmRows.Next() {
			var (
				id, doc string
				row     txRow
			)
			if err := rmRows.Scan(&id, &row.env, &row.customerID, &row.reference, &row.typ, &row.status, &doc, &row.createdAt); err != nil {
				rmRows.Close()
				return err
			}
			if row.record, err = rs.open(ctx, []byte(doc)); err != nil {
				rmRows.Close()
				return fmt.Errorf("audit: record %s: %w", id, err)
			}
			rows[id] = row
		}
		if err := rmRows.Err(); err != nil {
			return err
		}
		type replayed struct {
			ord   int64
			canon []byte
		}
		recs := map[string]replayed{}
		recRows, err := rs.conn.Query(ctx, `SELECT id, ord, canon FROM audit_records WHERE id = ANY ($1)`, page)
		if err != nil {
			return err
		}
		for recRows.Next() {
			var (
				id string
				r  replayed
			)
			if err := recRows.Scan(&id, &r.ord, &r.canon); err != nil {
				recRows.Close()
				return err
			}
			recs[id] = r
		}
		if err := recRows.Err(); err != nil {
			return err
		}
		for _, id := range page {
			row, hasRow := rows[id]
			rec, hasRec := recs[id]
			if !hasRec {
				found = append(found, keyed{ord: -1, id: id, diffs: []Difference{{Check: CheckRecord, Environment: domain.Environment(row.env), RecordID: id,
					Expected: "no row", Found: "a row (" + row.status + ")", Detail: "no such record in the event log"}}})
				continue
			}
			var want ledger.Record
			if err := json.Unmarshal(rec.canon, &want); err != nil {
				return fmt.Errorf("audit: record %s: %w", id, err)
			}
			if !hasRow {
				found = append(found, keyed{ord: rec.ord, id: id, diffs: []Difference{{Check: CheckRecord, Environment: want.Environment, RecordID: id,
					Expected: "a row (" + string(want.Status) + ")", Found: "no row"}}})
				continue
			}
			if diffs := compareRow(id, want, rec.canon, row); len(diffs) > 0 {
				found = append(found, keyed{ord: rec.ord, id: id, diffs: diffs})
			}
		}
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
