package projections

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/escrowd/escrowd/view"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
)

// Listings (docs/listings.md) page a tenant's rows newest first by a
// position the projector keeps: each row gets the next number of its
// merchant and environment when it first appears (pos; disputes have their
// own, dispute_pos, given when the dispute opens), so the order is the
// log's order of creation and never changes.
//
// Every row also carries the keys of the listings it belongs to (a column
// generated from the row's own columns, so it cannot disagree with them),
// and the projector keeps, in the same transaction as the row and its
// checkpoint, how many rows each key has in each bucket of 1,024
// consecutive positions. That gives a listing's total without counting
// rows, and turns page N into a keyset seek: sum the buckets newest first
// until the page's first row, then read from that bucket's upper bound
// skipping fewer rows than one bucket holds. A filter no key covers (a date
// range, a payment token, a combination not kept) counts its rows, but at
// most BoundedCount of them.

// bucketShift makes a bucket of 1 << bucketShift positions.
const bucketShift = 10

// BoundedCount is the most rows a listing counts when no kept key covers
// its filter; pages past it are reached with the cursor (startingAfter).
const BoundedCount = view.BoundedCount

// ErrUnknownCursor is returned for a startingAfter that names no row of
// the tenant's listing.
var ErrUnknownCursor = view.ErrUnknownCursor

// countsDDL creates the counts table of one projector: every projector owns
// its own, so a rebuild swaps it in with the rows it counts. A count is
// kept only while it counts something (countsSQL deletes one that reaches
// zero), so the live table holds exactly the rows a rebuild writes; no
// index covers n, so moving a count is a heap-only update.
func countsDDL(table string) string {
	return `
CREATE TABLE IF NOT EXISTS ` + table + ` (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    key         text NOT NULL,
    bucket      bigint NOT NULL,
    n           bigint NOT NULL,
    PRIMARY KEY (merchant_id, environment, key, bucket)
);`
}

// keyedOrder is one generated keys column and the position column its keys
// are ordered (and bucketed) by.
type keyedOrder struct{ keys, pos string }

// keptTable is a read-model table whose listings are counted.
type keptTable struct {
	table, counts, id string
	orders            []keyedOrder
	// fixed says that a row's keys and positions never change once it is
	// written (its upsert changes none of the columns they come from), so
	// only a new row moves the counts, and only up.
	fixed bool
}

// keptColumns are the columns a row's counted keys are read from.
func (k keptTable) keptColumns() string {
	cols := []string{"merchant_id", "environment"}
	for _, o := range k.orders {
		cols = append(cols, o.keys, o.pos)
	}
	return strings.Join(cols, ", ")
}

// nextPosSQL is the position the next row of a tenant takes (the merchant
// and environment are the placeholders given), for a table with one order.
func (k keptTable) nextPosSQL(merchant, env string) string {
	pos := k.orders[0].pos
	return `(SELECT coalesce(max(` + pos + `), 0) + 1 FROM ` + k.table + ` WHERE merchant_id = ` + merchant + ` AND environment = ` + env + `)`
}

// keysSQL selects (merchant_id, environment, key, bucket, n = sign), one
// row per key and position of each row of from (which has keptColumns).
func (k keptTable) keysSQL(from string, sign int) string {
	var parts []string
	for _, o := range k.orders {
		parts = append(parts, `SELECT merchant_id, environment, key, `+o.pos+` >> `+strconv.Itoa(bucketShift)+` AS bucket, `+
			strconv.Itoa(sign)+` AS n FROM `+from+` CROSS JOIN LATERAL unnest(`+o.keys+`) AS k(key) WHERE `+o.pos+` IS NOT NULL`)
	}
	return strings.Join(parts, ` UNION ALL `)
}

// countsSQL ends a statement whose CTE d holds net count changes
// (merchant_id, environment, key, bucket, n; one row per count, n never 0):
// a count that reaches zero is deleted, every other one is inserted or
// moved by one upsert. Each count is found by its key (as byIDs finds a
// row), never by joining d to the table: the plan kept for a projector's
// statement may have been made while the table was new. The upsert leaves
// out the counts deleted (one statement cannot change a row twice). Each
// projector is the only writer of its counts (its appliers take turns on
// its checkpoint; a rebuild writes its own shadow table), so the counts
// read are the counts changed.
func (k keptTable) countsSQL() string {
	match := func(c string) string {
		return `(` + c + `.merchant_id, ` + c + `.environment, ` + c + `.key, ` + c + `.bucket) = (d.merchant_id, d.environment, d.key, d.bucket)`
	}
	return `
	spent AS (DELETE FROM ` + k.counts + ` c WHERE c.ctid IN (
		SELECT z.ctid FROM d CROSS JOIN LATERAL (SELECT ctid FROM ` + k.counts + ` c WHERE ` + match("c") + ` AND c.n + d.n = 0 LIMIT 1) z)
		RETURNING c.merchant_id, c.environment, c.key, c.bucket)
	INSERT INTO ` + k.counts + ` AS c (merchant_id, environment, key, bucket, n)
	SELECT d.merchant_id, d.environment, d.key, d.bucket, d.n FROM d
	WHERE NOT EXISTS (SELECT 1 FROM spent s WHERE ` + match("s") + `)
	ORDER BY 1, 2, 3, 4
	ON CONFLICT (merchant_id, environment, key, bucket) DO UPDATE SET n = c.n + excluded.n`
}

// byIDs selects cols of the rows of table whose id (column id) is one of
// the text[] parameter ids (each row once, as id = ANY (ids) would),
// looking each up by itself (LIMIT 1 keeps the
// planner from joining the ids to the table as a whole). A projector's
// statements are prepared on long-lived connections, and the plan kept
// for them is made once: made while the table was small and never
// analyzed, a join to it is a hash join over a scan of the whole table,
// which then reads every row each batch as the table grows, until
// statistics come to replace the plan. A lookup by id has one plan at any
// size (TestProjectorLookupsSeekOnNewTables).
func byIDs(table, id, cols, ids string) string {
	return `SELECT p.* FROM (SELECT DISTINCT unnest(` + ids + `::text[])) AS u(id)
		CROSS JOIN LATERAL (SELECT ` + cols + ` FROM ` + table + ` t WHERE t.` + id + ` = u.id LIMIT 1) p`
}

// changeSQL makes write, an upsert of the rows whose ids are $1 that
// writes every one of them, also move their counts, in the one statement:
// the keys the rows had before (read in the statement's snapshot) count
// -1, the keys they have after (its RETURNING) +1, and only the counts
// whose sum is not zero change: a key the change keeps is not touched.
//
// For a fixed table only the rows the statement inserts count, +1 each,
// and a count never reaches zero: one upsert of the counts by their key.
func (k keptTable) changeSQL(write string) string {
	if k.fixed {
		return `WITH prior AS (` + byIDs(k.table, k.id, k.id, `$1`) + `),
	written AS (` + write + `
	RETURNING ` + k.id + `, ` + k.keptColumns() + `)
	INSERT INTO ` + k.counts + ` AS c (merchant_id, environment, key, bucket, n)
	SELECT merchant_id, environment, key, bucket, sum(n) FROM (` +
			k.keysSQL(`(SELECT * FROM written w WHERE NOT EXISTS (SELECT 1 FROM prior p WHERE p.`+k.id+` = w.`+k.id+`)) r`, 1) + `) r
	GROUP BY merchant_id, environment, key, bucket
	ORDER BY merchant_id, environment, key, bucket
	ON CONFLICT (merchant_id, environment, key, bucket) DO UPDATE SET n = c.n + excluded.n`
	}
	return `WITH prior AS (` + byIDs(k.table, k.id, k.keptColumns(), `$1`) + `),
	written AS (` + write + `
	RETURNING ` + k.keptColumns() + `),
	d AS (SELECT merchant_id, environment, key, bucket, sum(n) AS n FROM (` +
		k.keysSQL("prior", -1) + ` UNION ALL ` + k.keysSQL("written", 1) + `) r
		GROUP BY merchant_id, environment, key, bucket HAVING sum(n) <> 0),` + k.countsSQL()
}

// countKey is one count of a kept table.
type countKey struct {
	merchant, env, key string
	bucket             int64
}

// rowKeys reads the counted keys row id has now.
func (k keptTable) rowKeys(ctx context.Context, tx pgx.Tx, id string) (map[countKey]int64, error) {
	rows, err := tx.Query(ctx, k.keysSQL(`(SELECT `+k.keptColumns()+` FROM `+k.table+` WHERE `+k.id+` = $1) r`, 1), id)
	if err != nil {
		return nil, err
	}
	keys := map[countKey]int64{}
	for rows.Next() {
		var c countKey
		var n int64
		if err := rows.Scan(&c.merchant, &c.env, &c.key, &c.bucket, &n); err != nil {
			rows.Close()
			return nil, err
		}
		keys[c] += n
	}
	return keys, rows.Err()
}

// execChange runs write (any statements changing the row id) in tx and
// moves the counts by the keys the row lost and gained.
func (k keptTable) execChange(ctx context.Context, tx pgx.Tx, id string, write func() error) error {
	before, err := k.rowKeys(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	after, err := k.rowKeys(ctx, tx, id)
	if err != nil {
		return err
	}
	for c, n := range before {
		after[c] -= n
	}
	var merchants, envs, keys []string
	var buckets, ns []int64
	for c, n := range after {
		if n != 0 {
			merchants, envs, keys = append(merchants, c.merchant), append(envs, c.env), append(keys, c.key)
			buckets, ns = append(buckets, c.bucket), append(ns, n)
		}
	}
	if len(ns) == 0 {
		return nil
	}
	_, err = tx.Exec(ctx, `WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])
		AS d(merchant_id, environment, key, bucket, n)),`+k.countsSQL(), merchants, envs, keys, buckets, ns)
	return err
}

// backfillDDL numbers and counts the rows of a table made before listings
// had positions (once: only while some row has none; checking reads the
// table once at start). numbering gives, per position column, the rows
// that get one and their order.
func (k keptTable) backfillDDL(numbering []backfill) string {
	var b strings.Builder
	b.WriteString(`
DO $backfill$ BEGIN
IF EXISTS (SELECT 1 FROM ` + k.table + ` WHERE pos IS NULL) THEN`)
	for _, n := range numbering {
		b.WriteString(`
    UPDATE ` + k.table + ` r SET ` + n.pos + ` = x.n FROM (
        SELECT ` + k.id + ` AS id, row_number() OVER (PARTITION BY merchant_id, environment ORDER BY ` + n.order + `) AS n
        FROM ` + k.table + ` WHERE ` + n.where + `) x WHERE r.` + k.id + ` = x.id;`)
	}
	b.WriteString(`
    DELETE FROM ` + k.counts + `;
    ` + k.countAllSQL() + `;
END IF;
END $backfill$;`)
	return b.String()
}

// countAllSQL counts every row of the table into its (empty) counts
// table: what a backfill and a rebuild's fill do once the rows are
// written.
func (k keptTable) countAllSQL() string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + k.counts + ` (merchant_id, environment, key, bucket, n)
    SELECT merchant_id, environment, key, bucket, count(*) FROM (`)
	for i, o := range k.orders {
		if i > 0 {
			b.WriteString(` UNION ALL`)
		}
		b.WriteString(`
        SELECT merchant_id, environment, key, ` + o.pos + ` >> ` + strconv.Itoa(bucketShift) + ` AS bucket
        FROM ` + k.table + ` CROSS JOIN LATERAL unnest(` + o.keys + `) AS k(key) WHERE ` + o.pos + ` IS NOT NULL`)
	}
	b.WriteString(`) r GROUP BY 1, 2, 3, 4`)
	return b.String()
}

// backfill numbers the rows matching where by order into pos.
type backfill struct{ pos, where, order string }

// listing is one listing request over a kept table.
type listing struct {
	kept        keptTable
	pos         string // the order column, newest first
	merchant    string
	environment domain.Environment
	// branches are disjoint conditions whose union is the listing, each
	// served by an index on (…, pos); args are their arguments, numbered
	// from $3 ($1 and $2 are the merchant and the environment).
	branches []string
	args     []any
	// keys are the kept keys whose rows are exactly the listing's; nil
	// when none are (the count is then bounded).
	keys    []string
	columns string // what a row reads, before its id
}

// arg appends v to l's arguments and returns its placeholder.
func (l *listing) arg(v any) string {
	l.args = append(l.args, v)
	return "$" + strconv.Itoa(len(l.args)+2)
}

// and adds cond to every branch.
func (l *listing) and(cond string) {
	for i := range l.branches {
		l.branches[i] += ` AND ` + cond
	}
}

// page reads one page of l (p.Page, or the rows after the cursor p.After)
// and its pagination; scan reads one row of l.columns from rows, with tail
// (the row's id and position) as the last scan targets.
func (q *Queries) page(ctx context.Context, l listing, p view.Page, scan func(rows pgx.Rows, tail ...any) error) (view.Pagination, error) {
	sk, err := q.seek(ctx, l, p)
	if err != nil {
		return view.Pagination{}, err
	}
	var next *string
	if !sk.empty {
		if next, err = q.readRows(ctx, l, sk.upper, sk.skip, p.Limit, scan); err != nil {
			return view.Pagination{}, err
		}
	}
	return view.PageOf(p, sk.count, next), nil
}

// seeked is where a page of a listing starts: below position upper (no
// bound when nil), after skipping skip rows; empty when past the end.
type seeked struct {
	count int64
	upper *int64
	skip  int64
	empty bool
}

// seek finds where page p of l starts: from the kept buckets (the page's
// first row is in the bucket where their running sum, newest first,
// passes the rows before the page), at the cursor's row, or for a
// listing no key counts at an OFFSET within BoundedCount.
func (q *Queries) seek(ctx context.Context, l listing, p view.Page) (seeked, error) {
	count, buckets, err := q.total(ctx, l)
	if err != nil {
		return seeked{}, err
	}
	sk := seeked{count: count}
	if p.After != "" {
		pos, err := q.cursorPos(ctx, l, p.After)
		if err != nil {
			return seeked{}, err
		}
		sk.upper = &pos
		return sk, nil
	}
	k := int64(p.Page-1) * int64(p.Limit)
	switch {
	case k >= count:
		sk.empty = true
	case buckets != nil:
		var acc int64
		for _, b := range buckets {
			if acc+b.n > k {
				ub := (b.bucket + 1) << bucketShift
				sk.upper, sk.skip = &ub, k-acc
				break
			}
			acc += b.n
		}
	default:
		sk.skip = k
	}
	return sk, nil
}

type bucketCount struct{ bucket, n int64 }

// total is l's count and, when kept, its non-empty buckets newest first;
// otherwise a count of its rows up to BoundedCount.
func (q *Queries) total(ctx context.Context, l listing) (int64, []bucketCount, error) {
	if l.keys == nil {
		sql, args := l.boundedCountSQL()
		var n int64
		err := q.pool.QueryRow(ctx, sql, args...).Scan(&n)
		return n, nil, err
	}
	rows, err := q.pool.Query(ctx, `SELECT bucket, sum(n)::bigint FROM `+l.kept.counts+`
		WHERE merchant_id = $1 AND environment = $2 AND key = ANY ($3)
		GROUP BY bucket HAVING sum(n) <> 0 ORDER BY bucket DESC`, l.merchant, string(l.environment), l.keys)
	if err != nil {
		return 0, nil, err
	}
	buckets := []bucketCount{}
	var count int64
	for rows.Next() {
		var b bucketCount
		if err := rows.Scan(&b.bucket, &b.n); err != nil {
			rows.Close()
			return 0, nil, err
		}
		buckets = append(buckets, b)
		count += b.n
	}
	return count, buckets, rows.Err()
}

// boundedCountSQL counts the rows of l, a listing no key counts, up to
// BoundedCount.
func (l listing) boundedCountSQL() (string, []any) {
	return `SELECT count(*) FROM (SELECT 1 FROM ` + l.kept.table + ` WHERE merchant_id = $1 AND environment = $2 AND ((` +
		joinOr(l.branches) + `)) LIMIT ` + strconv.Itoa(BoundedCount) + `) x`, append([]any{l.merchant, string(l.environment)}, l.args...)
}

// cursorPos is the position of the row id names in l's tenant.
func (q *Queries) cursorPos(ctx context.Context, l listing, id string) (int64, error) {
	var pos *int64
	err := q.pool.QueryRow(ctx, `SELECT `+l.pos+` FROM `+l.kept.table+`
		WHERE `+l.kept.id+` = $1 AND merchant_id = $2 AND environment = $3`, id, l.merchant, string(l.environment)).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && pos == nil) {
		return 0, ErrUnknownCursor
	}
	return derefPos(pos), err
}

func derefPos(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// readRows reads limit rows of l below upper (all when nil) after skipping
// skip, newest first, and returns the id of the last one when more follow.
func (q *Queries) readRows(ctx context.Context, l listing, upper *int64, skip int64, limit int, scan func(rows pgx.Rows, tail ...any) error) (*string, error) {
	sql, args := l.rowsSQL(upper, skip, limit)
	rows, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		n    int
		id   string
		pos  int64
		more bool
	)
	for rows.Next() {
		if n == limit {
			more = true
			break
		}
		if err := scan(rows, &id, &pos); err != nil {
			return nil, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !more {
		return nil, nil
	}
	return &id, nil
}

// rowsSQL is the statement of readRows, which reads limit+1 rows (the
// last only tells that more follow). Each branch reads in its index's
// order at most skip+limit+1 rows; with several, their union is merged.
func (l listing) rowsSQL(upper *int64, skip int64, limit int) (string, []any) {
	args := append([]any{l.merchant, string(l.environment)}, l.args...)
	ph := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	bound := ""
	if upper != nil {
		bound = ` AND ` + l.pos + ` < ` + ph(*upper)
	}
	each := ph(skip + int64(limit) + 1)
	selects := make([]string, len(l.branches))
	for i, br := range l.branches {
		selects[i] = `(SELECT ` + l.columns + `, ` + l.kept.id + ` AS listing_id, ` + l.pos + ` AS listing_pos FROM ` + l.kept.table +
			` WHERE merchant_id = $1 AND environment = $2 AND ` + br + bound + ` ORDER BY ` + l.pos + ` DESC LIMIT ` + each + `)`
	}
	return `SELECT * FROM (` + strings.Join(selects, ` UNION ALL `) + `) u ORDER BY listing_pos DESC LIMIT ` +
		ph(limit+1) + ` OFFSET ` + ph(skip), args
}

// joinOr joins conditions with OR (each to be within parentheses).
func joinOr(conds []string) string { return strings.Join(conds, `) OR (`) }
