package webhooks

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/view"
)

// insertDelivery inserts a message of merchantID (test environment) as
// the subscriber would, pending, with orderKey ("" for none).
func (e *testEnv) insertDelivery(merchantID, orderKey string) uuid.UUID {
	e.t.Helper()
	id := uuid.New()
	var key *string
	if orderKey != "" {
		key = &orderKey
	}
	if _, err := e.pool.Exec(context.Background(), `
		INSERT INTO webhook_deliveries (id, merchant_id, environment, event, order_key, body)
		VALUES ($1, $2, 'test', 'payment.deposit.success', $3, '{}'::bytea)`, id, merchantID, key); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// lease leases delivery id for its next attempt, as a lease does, and
// returns the attempt's number.
func (e *testEnv) lease(id uuid.UUID) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `
		UPDATE webhook_deliveries
		   SET status = 'delivering', attempts = attempts + 1,
		       lease_until = now() + interval '1 minute', next_attempt_at = now() + interval '1 minute'
		 WHERE id = $1 RETURNING attempts`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *testEnv) record(outs ...outcome) bool {
	e.t.Helper()
	unblocked, err := recordOutcomes(context.Background(), e.pool, outs)
	if err != nil {
		e.t.Fatal(err)
	}
	return unblocked
}

// An ordered message that finishes without a request (no endpoint)
// unblocks its key's next message: other instances' dispatchers are told,
// as when a sent attempt finishes one.
func TestOrderedOutcomeWithoutRequestNotifies(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		t.Fatal(err)
	}
	id := e.insertDelivery("m-1", "escrow-1")
	msg := "No callback URL is set for this environment"
	if !e.record(outcome{ID: id, Attempt: e.lease(id), Status: StatusNoEndpoint, Err: &msg, At: time.Now()}) {
		t.Fatal("finishing an ordered message did not report it unblocked its key")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := conn.WaitForNotification(wctx); err != nil {
		t.Fatalf("no notification: %v", err)
	}
}

// recordBefore0009 records outcomes as recordOutcomes did before the last
// attempt moved onto the delivery row (migrations/0001_baseline.sql): the update (which
// leaves the row's attempt columns alone) and an insert of every sent
// outcome into webhook_attempts. It writes what a binary older than 0009
// writes, and its attempt log is the one recordOutcomes must keep.
func (e *testEnv) recordBefore0009(outs ...outcome) {
	e.t.Helper()
	if err := recordOutcomesBefore0009(context.Background(), e.pool, outs); err != nil {
		e.t.Fatal(err)
	}
}

func recordOutcomesBefore0009(ctx context.Context, pool *pgxpool.Pool, outs []outcome) error {
	n := len(outs)
	ids, attempts, statuses := make([]uuid.UUID, n), make([]int32, n), make([]string, n)
	codes, errs := make([]*int32, n), make([]*string, n)
	delays, undo := make([]int64, n), make([]int32, n)
	ats, tooks := make([]time.Time, n), make([]int32, n)
	var (
		lids        []uuid.UUID
		latt, ltook []int32
		lcode       []*int32
		lat         []time.Time
		lerr        []*string
	)
	for i, o := range outs {
		ids[i], attempts[i], statuses[i] = o.ID, int32(o.Attempt), o.Status
		codes[i], errs[i], delays[i] = o.Code, o.Err, o.Delay.Milliseconds()
		ats[i], tooks[i] = o.At, int32(o.Took.Milliseconds())
		if !o.Sent {
			undo[i] = 1
			continue
		}
		lids, latt, lat, lcode, lerr, ltook = append(lids, ids[i]), append(latt, attempts[i]), append(lat, ats[i]),
			append(lcode, codes[i]), append(lerr, errs[i]), append(ltook, tooks[i])
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit TO off`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE webhook_deliveries d
			   SET status = r.status, attempts = d.attempts - r.undo,
			       last_status_code = r.code, last_error = r.err, lease_until = NULL,
			       next_attempt_at = CASE WHEN r.status = 'pending'
			                              THEN now() + r.delay * interval '1 millisecond'
			                              ELSE d.next_attempt_at END,
			       delivered_at = CASE WHEN r.status = 'delivered' THEN r.at + r.took * interval '1 millisecond'
			                           ELSE d.delivered_at END,
			       finished_at = CASE WHEN r.status IN ('delivered', 'failed', 'no_endpoint')
			                          THEN r.at + r.took * interval '1 millisecond' END
			  FROM unnest($1::uuid[], $2::int[], $3::text[], $4::int[], $5::text[], $6::bigint[], $7::int[], $8::timestamptz[], $9::int[])
			       AS r(id, attempt, status, code, err, delay, undo, at, took)
			 WHERE d.id = r.id AND d.status = 'delivering' AND d.attempts = r.attempt
			RETURNING d.order_key IS NOT NULL`,
			pgUUIDs(ids), attempts, statuses, codes, errs, delays, undo, ats, tooks); err != nil {
			return err
		}
		if len(lids) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
			SELECT * FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::int[], $5::text[], $6::int[])
			ON CONFLICT DO NOTHING`, pgUUIDs(lids), latt, lat, lcode, lerr, ltook)
		return err
	})
}

// attemptsOf tells the attempt numbers of id in webhook_attempts, and the
// one its row holds (0: none).
func (e *testEnv) attemptsOf(id uuid.UUID) (table []int, row int) {
	e.t.Helper()
	ctx := context.Background()
	rows, err := e.pool.Query(ctx, `SELECT attempt FROM webhook_attempts WHERE delivery_id = $1 ORDER BY attempt`, id)
	if err != nil {
		e.t.Fatal(err)
	}
	table, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		e.t.Fatal(err)
	}
	var n *int
	if err := e.pool.QueryRow(ctx, `SELECT last_attempt FROM webhook_deliveries WHERE id = $1`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	if n != nil {
		row = *n
	}
	return table, row
}

// xmin changes with any write of the row.
func (e *testEnv) xmin(id uuid.UUID) string {
	e.t.Helper()
	var x string
	if err := e.pool.QueryRow(context.Background(), `SELECT xmin::text FROM webhook_deliveries WHERE id = $1`, id).Scan(&x); err != nil {
		e.t.Fatal(err)
	}
	return x
}

func (e *testEnv) get(id uuid.UUID) Delivery {
	e.t.Helper()
	d, err := e.box.Get(context.Background(), testMerchant, domain.Test, id.String())
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// testMerchant owns the messages of insertDelivery in these tests.
const testMerchant = "m-1"

// Outcomes of a sent attempt, started at at and taking took.
func delivered(id uuid.UUID, attempt int, at time.Time, took time.Duration) outcome {
	code := int32(200)
	return outcome{ID: id, Attempt: attempt, Status: StatusDelivered, Code: &code, At: at, Took: took, Sent: true}
}

func retried(id uuid.UUID, attempt int, code int32, msg string, at time.Time, took time.Duration) outcome {
	o := outcome{ID: id, Attempt: attempt, Status: StatusPending, Err: &msg, Delay: time.Minute, At: at, Took: took, Sent: true}
	if code != 0 {
		o.Code = &code
	}
	return o
}

func noEndpoint(id uuid.UUID, attempt int, at time.Time) outcome {
	msg := "No callback URL is set for this environment"
	return outcome{ID: id, Attempt: attempt, Status: StatusNoEndpoint, Err: &msg, At: at}
}

// twins is one history recorded twice: into a by recordOutcomes, into b
// by recordBefore0009 (the reference).
type twins struct {
	e    *testEnv
	a, b uuid.UUID
}

func (e *testEnv) twins() *twins {
	return &twins{e: e, a: e.insertDelivery(testMerchant, ""), b: e.insertDelivery(testMerchant, "")}
}

// lease leases both for their next attempt.
func (w *twins) lease() int {
	w.e.t.Helper()
	n, m := w.e.lease(w.a), w.e.lease(w.b)
	if n != m {
		w.e.t.Fatalf("twins leased for attempts %d and %d", n, m)
	}
	return n
}

// record records the outcomes made by of (given the message's id) for
// both, and checks that the API shows the same delivery for both, the
// times of the next attempt excepted (they are each one's now()).
func (w *twins) record(what string, of func(id uuid.UUID) []outcome) Delivery {
	w.e.t.Helper()
	w.e.record(of(w.a)...)
	w.e.recordBefore0009(of(w.b)...)
	return w.same(what)
}

// same checks the API shows the same delivery for both and returns a's.
func (w *twins) same(what string) Delivery {
	w.e.t.Helper()
	a, b := w.e.get(w.a), w.e.get(w.b)
	if (a.NextAttemptAt == nil) != (b.NextAttemptAt == nil) {
		w.e.t.Fatalf("%s: next attempt %v and %v", what, a.NextAttemptAt, b.NextAttemptAt)
	}
	b.ID, b.CreatedAt, b.NextAttemptAt = a.ID, a.CreatedAt, a.NextAttemptAt
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		w.e.t.Fatalf("%s: the API shows\n%s\nwhere the code before 0009 showed\n%s", what, ja, jb)
	}
	return a
}

// pgTime is t as timestamptz keeps it.
func pgTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

func intp(n int) *int { return &n }

func strp(s string) *string { return &s }

func wantLog(t *testing.T, what string, got []Attempt, want ...Attempt) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("%s: attempt log\n%s\nwant\n%s", what, g, w)
	}
}

// A message delivered at its first attempt leaves no row in
// webhook_attempts: its one logged attempt, as the API shows it, is on
// the delivery row.
func TestFirstAttemptIsLoggedOnTheRow(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Minute))
	w := e.twins()
	n := w.lease()
	d := w.record("delivered", func(id uuid.UUID) []outcome { return []outcome{delivered(id, n, base, 37*time.Millisecond)} })
	wantLog(t, "delivered", d.AttemptLog, Attempt{Attempt: 1, At: base, StatusCode: intp(200), DurationMs: 37})
	if table, row := e.attemptsOf(w.a); len(table) != 0 || row != 1 {
		t.Fatalf("attempts in webhook_attempts %v, on the row %d; want none and 1", table, row)
	}
	if d.Status != StatusDelivered || d.Attempts != 1 || d.DeliveredAt == nil || !d.DeliveredAt.Equal(base.Add(37*time.Millisecond)) {
		t.Fatalf("delivery %+v", d)
	}
}

// The same through the dispatcher and a receiver.
func TestDispatchedFirstAttemptLeavesNoAttemptRow(t *testing.T) {
	e := newTestEnv(t)
	rc := newReceiver(t, nil, func(hit) int { time.Sleep(20 * time.Millisecond); return http.StatusAccepted })
	m := e.merchant(rc.srv.URL)
	e.runSubscriber(e.pool)
	e.runDispatcher(e.pool)
	before := time.Now()
	id := e.deposits(m.MerchantID, 1)[0]
	eventually(t, 10*time.Second, "delivered", func() bool { return e.statuses()[StatusDelivered] == 1 })
	after := time.Now()
	if n := e.count(`SELECT count(*) FROM webhook_attempts`); n != 0 {
		t.Fatalf("%d rows in webhook_attempts, want 0", n)
	}
	d, err := e.box.Get(context.Background(), m.MerchantID, domain.Test, id.String())
	if err != nil {
		t.Fatal(err)
	}
	hits := rc.all()
	if len(d.AttemptLog) != 1 || len(hits) != 1 {
		t.Fatalf("attempt log %+v, %d requests; want one of each", d.AttemptLog, len(hits))
	}
	a := d.AttemptLog[0]
	if a.Attempt != 1 || a.StatusCode == nil || *a.StatusCode != http.StatusAccepted || a.Error != nil ||
		a.At.Before(pgTime(before)) || a.At.After(hits[0].At) || a.DurationMs < 20 || a.DurationMs > int(after.Sub(before).Milliseconds()) ||
		d.LastStatusCode == nil || *d.LastStatusCode != http.StatusAccepted || d.DeliveredAt == nil ||
		!d.DeliveredAt.Equal(a.At.Add(time.Duration(a.DurationMs)*time.Millisecond)) {
		t.Fatalf("attempt %+v of delivery %+v, sent %s-%s, received %s", a, d, before, after, hits[0].At)
	}
}

// A message that fails, then fails again without a response, then is
// delivered keeps the whole log, as the code before 0009 showed it at
// every step; the earlier attempts move into webhook_attempts, the last
// stays on the row.
func TestRetriedMessageKeepsTheWholeLog(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Hour))
	w := e.twins()

	n := w.lease()
	d := w.record("first attempt failed", func(id uuid.UUID) []outcome {
		return []outcome{retried(id, n, 500, "HTTP 500: oops", base, 12*time.Millisecond)}
	})
	first := Attempt{Attempt: 1, At: base, StatusCode: intp(500), Error: strp("HTTP 500: oops"), DurationMs: 12}
	wantLog(t, "first attempt failed", d.AttemptLog, first)
	if table, row := e.attemptsOf(w.a); len(table) != 0 || row != 1 {
		t.Fatalf("after the first attempt: %v in webhook_attempts, %d on the row; want none and 1", table, row)
	}

	n = w.lease()
	d = w.record("second attempt failed", func(id uuid.UUID) []outcome {
		return []outcome{retried(id, n, 0, "no response within 10s", base.Add(time.Minute), 10*time.Second)}
	})
	second := Attempt{Attempt: 2, At: base.Add(time.Minute), Error: strp("no response within 10s"), DurationMs: 10000}
	wantLog(t, "second attempt failed", d.AttemptLog, first, second)
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1}) || row != 2 {
		t.Fatalf("after the second attempt: %v in webhook_attempts, %d on the row; want [1] and 2", table, row)
	}

	n = w.lease()
	d = w.record("delivered", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, n, base.Add(3*time.Minute), 8*time.Millisecond)}
	})
	third := Attempt{Attempt: 3, At: base.Add(3 * time.Minute), StatusCode: intp(200), DurationMs: 8}
	wantLog(t, "delivered", d.AttemptLog, first, second, third)
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1, 2}) || row != 3 {
		t.Fatalf("after the third attempt: %v in webhook_attempts, %d on the row; want [1 2] and 3", table, row)
	}

	// Recording the last outcome again changes nothing.
	x := e.xmin(w.a)
	d = w.record("recorded again", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, n, base.Add(3*time.Minute), 8*time.Millisecond)}
	})
	wantLog(t, "recorded again", d.AttemptLog, first, second, third)
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1, 2}) || row != 3 || e.xmin(w.a) != x {
		t.Fatalf("recorded again: %v in webhook_attempts, %d on the row, row written %v", table, row, e.xmin(w.a) != x)
	}
}

// An outcome whose lease was taken over (the row is leased for a later
// attempt) changes nothing on the row and moves nothing off it; the
// attempt is logged, as before 0009, since its request was made.
func TestStaleOutcomeMovesNothing(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Hour))
	w := e.twins()
	n := w.lease()
	w.record("first attempt failed", func(id uuid.UUID) []outcome {
		return []outcome{retried(id, n, 503, "HTTP 503", base, 5*time.Millisecond)}
	})
	stale := w.lease() // its dispatcher's lease runs out...
	n = w.lease()      // ...and another dispatcher leases the message
	x := e.xmin(w.a)
	d := w.record("stale outcome", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, stale, base.Add(time.Minute), 30*time.Second)}
	})
	first := Attempt{Attempt: 1, At: base, StatusCode: intp(503), Error: strp("HTTP 503"), DurationMs: 5}
	second := Attempt{Attempt: 2, At: base.Add(time.Minute), StatusCode: intp(200), DurationMs: 30000}
	wantLog(t, "stale outcome", d.AttemptLog, first, second)
	if d.Status != StatusDelivering || d.Attempts != 3 || d.LastStatusCode == nil || *d.LastStatusCode != 503 || d.DeliveredAt != nil {
		t.Fatalf("the stale outcome changed the delivery: %+v", d)
	}
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{2}) || row != 1 || e.xmin(w.a) != x {
		t.Fatalf("stale outcome: %v in webhook_attempts, %d on the row, row written %v; want [2], 1, not written",
			table, row, e.xmin(w.a) != x)
	}
	// Recorded again, still nothing.
	w.record("stale outcome again", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, stale, base.Add(time.Minute), 30*time.Second)}
	})
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{2}) || row != 1 || e.xmin(w.a) != x {
		t.Fatalf("stale outcome again: %v in webhook_attempts, %d on the row, row written %v", table, row, e.xmin(w.a) != x)
	}
	// The current attempt, and a stale outcome of the first attempt in the
	// same batch (recorded already: not logged twice).
	d = w.record("current outcome", func(id uuid.UUID) []outcome {
		return []outcome{
			retried(id, 1, 503, "HTTP 503", base, 5*time.Millisecond),
			delivered(id, n, base.Add(2*time.Minute), 4*time.Millisecond),
		}
	})
	third := Attempt{Attempt: 3, At: base.Add(2 * time.Minute), StatusCode: intp(200), DurationMs: 4}
	wantLog(t, "current outcome", d.AttemptLog, first, second, third)
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1, 2}) || row != 3 {
		t.Fatalf("current outcome: %v in webhook_attempts, %d on the row; want [1 2] and 3", table, row)
	}
}

// An outcome that made no request (no endpoint) gives its attempt back
// and logs nothing: the attempt on the row stays as it was, though
// last_status_code and last_error now tell of the missing endpoint.
func TestUnsentOutcomeKeepsTheRowsAttempt(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Hour))
	w := e.twins()
	n := w.lease()
	w.record("first attempt failed", func(id uuid.UUID) []outcome {
		return []outcome{retried(id, n, 500, "HTTP 500", base, 9*time.Millisecond)}
	})
	n = w.lease()
	d := w.record("no endpoint", func(id uuid.UUID) []outcome { return []outcome{noEndpoint(id, n, base.Add(time.Minute))} })
	first := Attempt{Attempt: 1, At: base, StatusCode: intp(500), Error: strp("HTTP 500"), DurationMs: 9}
	wantLog(t, "no endpoint", d.AttemptLog, first)
	if d.Status != StatusNoEndpoint || d.Attempts != 1 || d.LastStatusCode != nil || d.LastError == nil {
		t.Fatalf("no endpoint: %+v", d)
	}
	// Nothing moved: the row's attempt is still the last one logged, and
	// webhook_attempts holds only the attempts before it (none).
	if table, row := e.attemptsOf(w.a); len(table) != 0 || row != 1 {
		t.Fatalf("no endpoint: %v in webhook_attempts, %d on the row; want none and 1", table, row)
	}
	n = w.lease()
	d = w.record("delivered", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, n, base.Add(2*time.Minute), 6*time.Millisecond)}
	})
	wantLog(t, "delivered", d.AttemptLog, first, Attempt{Attempt: 2, At: base.Add(2 * time.Minute), StatusCode: intp(200), DurationMs: 6})
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1}) || row != 2 {
		t.Fatalf("delivered: %v in webhook_attempts, %d on the row; want [1] and 2", table, row)
	}
}

// A row written before 0009 (its whole log in webhook_attempts, no
// attempt on the row) reads as it did, and its next attempt goes on the
// row: no attempt lost, none twice. Its twin keeps being recorded the old
// way; a binary older than 0009 recording an attempt of a row that holds
// one (a rolling upgrade) loses nothing either.
func TestRowsWrittenBefore0009(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Hour))
	w := e.twins()
	first := Attempt{Attempt: 1, At: base, StatusCode: intp(500), Error: strp("HTTP 500"), DurationMs: 3}
	second := Attempt{Attempt: 2, At: base.Add(time.Minute), Error: strp("connection refused"), DurationMs: 1}
	for _, id := range []uuid.UUID{w.a, w.b} {
		e.lease(id)
		e.recordBefore0009(retried(id, 1, 500, "HTTP 500", base, 3*time.Millisecond))
		e.lease(id)
		e.recordBefore0009(retried(id, 2, 0, "connection refused", base.Add(time.Minute), time.Millisecond))
	}
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1, 2}) || row != 0 {
		t.Fatalf("written before 0009: %v in webhook_attempts, %d on the row; want [1 2] and none", table, row)
	}
	wantLog(t, "written before 0009", w.same("written before 0009").AttemptLog, first, second)

	n := w.lease()
	d := w.record("third attempt failed", func(id uuid.UUID) []outcome {
		return []outcome{retried(id, n, 502, "HTTP 502", base.Add(2*time.Minute), 2*time.Millisecond)}
	})
	third := Attempt{Attempt: 3, At: base.Add(2 * time.Minute), StatusCode: intp(502), Error: strp("HTTP 502"), DurationMs: 2}
	wantLog(t, "third attempt failed", d.AttemptLog, first, second, third)
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1, 2}) || row != 3 {
		t.Fatalf("third attempt: %v in webhook_attempts, %d on the row; want [1 2] and 3", table, row)
	}

	// A binary older than 0009 records the fourth attempt of both: the
	// row keeps the third, with its own code and error.
	for _, id := range []uuid.UUID{w.a, w.b} {
		e.lease(id)
		e.recordBefore0009(retried(id, 4, 504, "HTTP 504", base.Add(3*time.Minute), 4*time.Millisecond))
	}
	fourth := Attempt{Attempt: 4, At: base.Add(3 * time.Minute), StatusCode: intp(504), Error: strp("HTTP 504"), DurationMs: 4}
	wantLog(t, "fourth attempt by an older binary", w.same("fourth attempt by an older binary").AttemptLog, first, second, third, fourth)

	n = w.lease()
	d = w.record("delivered", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, n, base.Add(4*time.Minute), 7*time.Millisecond)}
	})
	fifth := Attempt{Attempt: 5, At: base.Add(4 * time.Minute), StatusCode: intp(200), DurationMs: 7}
	wantLog(t, "delivered", d.AttemptLog, first, second, third, fourth, fifth)
	if table, row := e.attemptsOf(w.a); !slices.Equal(table, []int{1, 2, 3, 4}) || row != 5 {
		t.Fatalf("delivered: %v in webhook_attempts, %d on the row; want [1 2 3 4] and 5", table, row)
	}
}

// The list reads the log as Get does, the row's attempt of each delivery
// included.
func TestListShowsEachRowsAttempt(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Hour))
	w := e.twins()
	n := w.lease()
	w.record("failed", func(id uuid.UUID) []outcome {
		return []outcome{retried(id, n, 500, "HTTP 500", base, time.Millisecond)}
	})
	n = w.lease()
	w.record("delivered", func(id uuid.UUID) []outcome {
		return []outcome{delivered(id, n, base.Add(time.Minute), time.Millisecond)}
	})
	fresh := e.insertDelivery(testMerchant, "")
	list, _, err := e.box.List(context.Background(), testMerchant, domain.Test, DeliveryFilter{}, view.Page{Page: 1, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("%d deliveries listed, want 3", len(list))
	}
	for _, d := range list {
		want := e.get(uuid.MustParse(d.ID))
		g, _ := json.Marshal(d)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("listed\n%s\nwhere Get shows\n%s", g, w)
		}
		if n := len(d.AttemptLog); d.ID == fresh.String() && n != 0 || d.ID != fresh.String() && n != 2 {
			t.Fatalf("delivery %s lists %d attempts", d.ID, n)
		}
	}
}

// A swept delivery takes its whole log along: the row's attempt and the
// earlier ones in webhook_attempts.
func TestSweepDeletesTheWholeLog(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-3 * time.Hour))
	id := e.insertDelivery(testMerchant, "")
	e.lease(id)
	e.record(retried(id, 1, 500, "HTTP 500", base, time.Millisecond))
	e.lease(id)
	e.record(delivered(id, 2, base.Add(time.Minute), time.Millisecond))
	if table, row := e.attemptsOf(id); !slices.Equal(table, []int{1}) || row != 2 {
		t.Fatalf("before the sweep: %v in webhook_attempts, %d on the row; want [1] and 2", table, row)
	}
	wantSweep(t, "3 h later", e.sweep(&Sweeper{Pool: e.pool, Retention: time.Hour, Interval: time.Minute}), 1, 0, 0)
	if n := e.count(`SELECT count(*) FROM webhook_attempts`); n != 0 {
		t.Fatalf("%d rows left in webhook_attempts", n)
	}
}

// An attempt both on the row and in webhook_attempts (the row read before
// an outcome moved its attempt, the table after) is shown once.
func TestAttemptInBothPlacesShownOnce(t *testing.T) {
	e := newTestEnv(t)
	base := pgTime(time.Now().Add(-time.Hour))
	id := e.insertDelivery(testMerchant, "")
	e.lease(id)
	e.record(retried(id, 1, 500, "HTTP 500", base, time.Millisecond))
	e.lease(id)
	e.record(delivered(id, 2, base.Add(time.Minute), 2*time.Millisecond))
	if _, err := e.pool.Exec(context.Background(), `
		INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
		SELECT id, last_attempt, last_attempt_at, last_attempt_status_code, last_attempt_error, last_attempt_duration_ms
		  FROM webhook_deliveries WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if table, row := e.attemptsOf(id); !slices.Equal(table, []int{1, 2}) || row != 2 {
		t.Fatalf("%v in webhook_attempts, %d on the row; want [1 2] and 2", table, row)
	}
	wantLog(t, "attempt 2 in both places", e.get(id).AttemptLog,
		Attempt{Attempt: 1, At: base, StatusCode: intp(500), Error: strp("HTTP 500"), DurationMs: 1},
		Attempt{Attempt: 2, At: base.Add(time.Minute), StatusCode: intp(200), DurationMs: 2})
}

// TestDeliveryLogReadsOneMoment: outcomes recorded while the delivery log
// is being read (between its statements) never show a delivery whose
// attempt counter and attempt log disagree: List and Get read the rows and
// the attempts as of one moment.
func TestDeliveryLogReadsOneMoment(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := e.insertDelivery("m-1", "")
	code := int32(500)
	fail := func() {
		e.record(outcome{ID: id, Attempt: e.lease(id), Status: StatusPending, Code: &code, Delay: time.Hour, At: time.Now(), Sent: true})
	}
	fail() // attempt 1, held by the row
	reads := 0
	box := NewOutbox(e.pool, BetweenReads(func() {
		// Two more attempts between the rows and the attempts: each
		// outcome moves the attempt before it into webhook_attempts.
		reads++
		fail()
		fail()
	}))
	check := func(name string, d Delivery) {
		t.Helper()
		if d.Attempts != len(d.AttemptLog) {
			t.Errorf("%s: attempts %d, attempt log %v", name, d.Attempts, d.AttemptLog)
		}
		for i, a := range d.AttemptLog {
			if a.Attempt != i+1 {
				t.Errorf("%s: attempt log %v is not attempts 1..%d", name, d.AttemptLog, len(d.AttemptLog))
			}
		}
	}
	list, _, err := box.List(ctx, "m-1", domain.Test, DeliveryFilter{}, view.Page{Page: 1, Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	check("list", list[0])
	got, err := box.Get(ctx, "m-1", domain.Test, id.String())
	if err != nil {
		t.Fatal(err)
	}
	check("get", got)
	if reads != 2 || got.Attempts != 3 {
		t.Fatalf("%d reads, get saw %d attempts: the hook did not run between the statements", reads, got.Attempts)
	}
}
