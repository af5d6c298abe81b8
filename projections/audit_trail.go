package projections

import (
	"context"
	"errors"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// AuditTrail keeps what pages the audit trail (GET /v1/events, read from
// the event store itself) without counting or skipping a tenant's history:
// how many events each tenant has under each key (events, t=<type>, and
// t=<prefix>. for each dot-ended prefix of the type, the filters the API
// takes), and a mark every 1,024 events of a key: the position of that
// event. Page N then reads from the mark before its first event, skipping
// fewer than 1,024 (docs/listings.md).
type AuditTrail struct{}

// auditMarkEvery is the distance between two marks of a key.
const auditMarkEvery = 1 << bucketShift

func (AuditTrail) Name() string     { return AuditTrailName }
func (AuditTrail) Tables() []string { return []string{"rm_event_counts", "rm_event_marks"} }
func (AuditTrail) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_event_counts (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    key         text NOT NULL,
    n           bigint NOT NULL,
    PRIMARY KEY (merchant_id, environment, key)
);
-- The position of the n-th event (1-based) of a key, for n a multiple of 1,024.
CREATE TABLE IF NOT EXISTS rm_event_marks (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    key         text NOT NULL,
    n           bigint NOT NULL,
    commit_pos  bigint NOT NULL,
    prepare_pos bigint NOT NULL,
    PRIMARY KEY (merchant_id, environment, key, n)
);`
}

// auditKeys are the keys an event of type typ counts under.
func auditKeys(typ string) []string {
	keys := []string{"events", "t=" + typ}
	for i := 0; i < len(typ)-1; i++ {
		if typ[i] == '.' {
			keys = append(keys, "t="+typ[:i+1])
		}
	}
	return keys
}

// auditKey is the key of a filter on type ("" for none).
func auditKey(typ string) string {
	if typ == "" {
		return "events"
	}
	return "t=" + typ
}

type auditCounter struct{ merchant, env, key string }

// auditCountsSQL reads the counts of the keys ($1, $2, $3: merchants,
// environments, keys), each looked up by its key, as byIDs does.
const auditCountsSQL = `SELECT c.merchant_id, c.environment, c.key, c.n FROM unnest($1::text[], $2::text[], $3::text[]) AS x(m, e, k)
	CROSS JOIN LATERAL (SELECT * FROM rm_event_counts c WHERE (c.merchant_id, c.environment, c.key) = (x.m, x.e, x.k) LIMIT 1) c`

func (a AuditTrail) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, a, tx, events)
}

// Plan reads the counts of the keys the batch touches (the runner's
// checkpoint move fails, and nothing commits, if they were ahead of the
// batch), numbers the batch's events on from them, and queues the new
// counts and the marks that fall in the batch.
func (AuditTrail) Plan(ctx context.Context, r Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	type tagged struct {
		keys []auditCounter
		pos  eventstore.Position
	}
	var evs []tagged
	touched := map[auditCounter]int64{}
	for _, re := range events {
		m, env, ok := eventstore.TenantOf(re.Metadata)
		if !ok {
			continue
		}
		t := tagged{pos: re.Position}
		for _, k := range auditKeys(re.Type) {
			c := auditCounter{m, env, k}
			t.keys = append(t.keys, c)
			touched[c] = 0
		}
		evs = append(evs, t)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	order := make([]auditCounter, 0, len(touched))
	for c := range touched {
		order = append(order, c)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		return a.merchant < b.merchant || (a.merchant == b.merchant && (a.env < b.env || (a.env == b.env && a.key < b.key)))
	})
	ms, envs, keys := make([]string, len(order)), make([]string, len(order)), make([]string, len(order))
	for i, c := range order {
		ms[i], envs[i], keys[i] = c.merchant, c.env, c.key
	}
	rows, err := r.Query(ctx, auditCountsSQL, ms, envs, keys)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var c auditCounter
		var n int64
		if err := rows.Scan(&c.merchant, &c.env, &c.key, &n); err != nil {
			rows.Close()
			return nil, err
		}
		touched[c] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var mm, me, mk []string
	var mn, mc, mp []int64
	for _, e := range evs {
		for _, c := range e.keys {
			touched[c]++
			if n := touched[c]; n%auditMarkEvery == 0 {
				mm, me, mk = append(mm, c.merchant), append(me, c.env), append(mk, c.key)
				mn, mc, mp = append(mn, n), append(mc, int64(e.pos.Commit)), append(mp, int64(e.pos.Prepare))
			}
		}
	}
	counts := make([]int64, len(order))
	for i, c := range order {
		counts[i] = touched[c]
	}
	b.Queue(`INSERT INTO rm_event_counts (merchant_id, environment, key, n)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
		ON CONFLICT (merchant_id, environment, key) DO UPDATE SET n = excluded.n`, ms, envs, keys, counts)
	if len(mm) > 0 {
		b.Queue(`INSERT INTO rm_event_marks (merchant_id, environment, key, n, commit_pos, prepare_pos)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[])
			ON CONFLICT DO NOTHING`, mm, me, mk, mn, mc, mp)
	}
	return nil, nil
}

// AuditSeek is where page reading of a tenant's events starts: after
// After, skipping Skip of the matching events.
type AuditSeek struct {
	After eventstore.Position
	Skip  int
}

// AuditPage is the count of a tenant's events matching typ ("" for all;
// an exact type, or a prefix ending in ".", which auditKeys keeps for every
// type it is a prefix of) and where the events from the k-th (0-based) on
// are read from.
func (q *Queries) AuditPage(ctx context.Context, merchantID string, env domain.Environment, typ string, k int64) (int64, AuditSeek, error) {
	key := auditKey(typ)
	var count int64
	err := q.pool.QueryRow(ctx, `SELECT n FROM rm_event_counts WHERE merchant_id = $1 AND environment = $2 AND key = $3`,
		merchantID, string(env), key).Scan(&count)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, AuditSeek{}, nil
	}
	if err != nil {
		return 0, AuditSeek{}, err
	}
	seek := AuditSeek{Skip: int(k)}
	if mark := k / auditMarkEvery * auditMarkEvery; mark > 0 && k < count {
		var c, p int64
		if err := q.pool.QueryRow(ctx, `SELECT commit_pos, prepare_pos FROM rm_event_marks
			WHERE merchant_id = $1 AND environment = $2 AND key = $3 AND n = $4`, merchantID, string(env), key, mark).Scan(&c, &p); err != nil {
			return 0, AuditSeek{}, err
		}
		seek = AuditSeek{After: eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}, Skip: int(k - mark)}
	}
	return count, seek, nil
}

// NewFill counts a rebuild's events in memory (Filler): the counts are
// per tenant and key, few; the marks, one per 1,024 events of a key, are
// written as they pile up.
func (AuditTrail) NewFill() Fill { return &auditFill{counts: map[auditCounter]int64{}} }

type auditFill struct {
	counts map[auditCounter]int64
	marks  [][]any
}

func (f *auditFill) Take(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	for _, re := range events {
		m, env, ok := eventstore.TenantOf(re.Metadata)
		if !ok {
			continue
		}
		for _, k := range auditKeys(re.Type) {
			c := auditCounter{m, env, k}
			f.counts[c]++
			if n := f.counts[c]; n%auditMarkEvery == 0 {
				f.marks = append(f.marks, []any{m, env, k, n, int64(re.Position.Commit), int64(re.Position.Prepare)})
			}
		}
	}
	if len(f.marks) < fillHold {
		return nil
	}
	return f.writeMarks(ctx, tx)
}

func (f *auditFill) writeMarks(ctx context.Context, tx pgx.Tx) error {
	err := copyRows(ctx, tx, "rm_event_marks", []string{"merchant_id", "environment", "key", "n", "commit_pos", "prepare_pos"}, f.marks)
	f.marks = f.marks[:0]
	return err
}

func (f *auditFill) Finish(ctx context.Context, tx pgx.Tx) error {
	if err := f.writeMarks(ctx, tx); err != nil {
		return err
	}
	counts := make([][]any, 0, len(f.counts))
	for c, n := range f.counts {
		counts = append(counts, []any{c.merchant, c.env, c.key, n})
	}
	return copyRows(ctx, tx, "rm_event_counts", []string{"merchant_id", "environment", "key", "n"}, counts)
}
