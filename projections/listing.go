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
// its own, so a rebuild swaps it in with the rows it counts.
func countsDDL(table string) string {
	return `
CREATE TABLE IF NOT EXISTS ` + table + ` (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    key         text NOT NULL,
    bucket      bigint NOT NULL,
    n           bigint NOT NULL,
    PRIMARY KEY (merchant_id, environment, key, bucket)
);
CREATE INDEX IF NOT EXISTS ` + table + `_spent ON ` + table + ` (merchant_id) WHERE n = 0;`
}

// keyedOrder is one generated keys column and the position column its keys
// are ordered (and bucketed) by.
type keyedOrder struct{ keys, pos string }

// keptTable is a read-model table whose listings are counted.
type keptTable struct {
	table, counts, id string
	orders            []keyedOrder
}

// deltaSQL adds sign times the keys of the rows whose id is in $1 to the
// counts. Run with -1 before the rows change and +1 after, in the same
// transaction: a key the change keeps nets to zero, one it drops or adds
// moves by one, whatever the change was.
func (k keptTable) deltaSQL(sign int) string {
	var parts []string
	for _, o := range k.orders {
		parts = append(parts, `SELECT merchant_id, environment, key, `+o.pos+` >> `+strconv.Itoa(bucketShift)+` AS bucket
		FROM `+k.table+` CROSS JOIN LATERAL unnest(`+o.keys+`) AS k(key)
		WHERE `+k.id+` = ANY ($1) AND `+o.pos+` IS NOT NULL`)
	}
	return `INSERT INTO ` + k.counts + ` AS c (merchant_id, environment, key, bucket, n)
		SELECT merchant_id, environment, key, bucket, ` + strconv.Itoa(sign) + ` * count(*) FROM (` +
		strings.Join(parts, ` UNION ALL `) + `) r
		GROUP BY merchant_id, environment, key, bucket
		ORDER BY merchant_id, environment, key, bucket
		ON CONFLICT (merchant_id, environment, key, bucket) DO UPDATE SET n = c.n + excluded.n`
}

// spentSQL removes the counts a change brought to zero (a key its rows
// no longer carry), through the partial index of such rows: a count is
// kept only while it counts something, so the live table holds exactly
// the rows a rebuild from the log writes.
func (k keptTable) spentSQL() string {
	return `DELETE FROM ` + k.counts + ` WHERE n = 0`
}

// queueDelta queues deltaSQL(sign) for ids: before a batch's writes of
// those rows with -1, after them with +1 (and then spentSQL).
func (k keptTable) queueDelta(b *pgx.Batch, ids []string, sign int) {
	b.Queue(k.deltaSQL(sign), ids)
	if sign > 0 {
		b.Queue(k.spentSQL())
	}
}

// execChange runs write for the row id in tx with the counts moved around it.
func (k keptTable) execChange(ctx context.Context, tx pgx.Tx, id string, write func() error) error {
	if _, err := tx.Exec(ctx, k.deltaSQL(-1), []string{id}); err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, k.deltaSQL(1), []string{id}); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, k.spentSQL())
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
    INSERT INTO ` + k.counts + ` (merchant_id, environment, key, bucket, n)
    SELECT merchant_id, environment, key, bucket, count(*) FROM (`)
	for i, o := range k.orders {
		if i > 0 {
			b.WriteString(` UNION ALL`)
		}
		b.WriteString(`
        SELECT merchant_id, environment, key, ` + o.pos + ` >> ` + strconv.Itoa(bucketShift) + ` AS bucket
        FROM ` + k.table + ` CROSS JOIN LATERAL unnest(` + o.keys + `) AS k(key) WHERE ` + o.pos + ` IS NOT NULL`)
	}
	b.WriteString(`) r GROUP BY 1, 2, 3, 4;
END IF;
END $backfill$;`)
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
		args := append([]any{l.merchant, string(l.environment)}, l.args...)
		var n int64
		err := q.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+l.kept.table+
			` WHERE merchant_id = $1 AND environment = $2 AND ((`+joinOr(l.branches)+`))
			LIMIT `+strconv.Itoa(BoundedCount)+`) x`, args...).Scan(&n)
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
