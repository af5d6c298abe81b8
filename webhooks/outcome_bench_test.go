package webhooks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// BenchmarkRecordOutcomes measures recording a dispatcher's batch of 16
// delivered outcomes: first attempts (nearly every message) and second
// attempts of messages whose first failed; "before0009" is the code that
// logged every attempt in webhook_attempts. Each batch's rows are
// inserted and leased untimed, on another connection, into an outbox of
// 20,000 delivered rows. It reports us/outcome, the dispatcher's wait for
// the transaction (round trips and the server's work), and, with a local
// server, pg-cpu-us/outcome, the CPU time of the backend that recorded
// them (steadier on a shared host).
func BenchmarkRecordOutcomes(b *testing.B) {
	for _, attempt := range []int{1, 2} {
		for _, v := range []struct {
			name   string
			record func(context.Context, *pgxpool.Pool, []outcome) error
		}{
			{"before0009", recordOutcomesBefore0009},
			{"now", func(ctx context.Context, pool *pgxpool.Pool, outs []outcome) error {
				_, err := recordOutcomes(ctx, pool, outs)
				return err
			}},
		} {
			b.Run(fmt.Sprintf("attempt=%d/%s", attempt, v.name), func(b *testing.B) { benchRecord(b, attempt, v.record) })
		}
	}
}

func benchRecord(b *testing.B, attempt int, record func(context.Context, *pgxpool.Pool, []outcome) error) {
	const batch = 16
	ctx := context.Background()
	url := pgtest.NewURL(b)
	pool := pgtest.OpenPool(b, url)
	// The recording connection, alone on its backend.
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	rec, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	var backend int
	if err := rec.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO webhook_deliveries (id, merchant_id, environment, event, body, status, attempts, delivered_at, finished_at)
		SELECT gen_random_uuid(), 'm-' || (i % 8), 'test', 'payment.settled', '{}'::bytea, 'delivered', 1, now(), now()
		  FROM generate_series(1, 20000) AS i`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE webhook_deliveries`); err != nil {
		b.Fatal(err)
	}
	code := int32(200)
	lease := func(ids []uuid.UUID) {
		if _, err := pool.Exec(ctx, `
			UPDATE webhook_deliveries SET status = 'delivering', attempts = attempts + 1,
			       lease_until = now() + interval '1 minute', next_attempt_at = now() + interval '1 minute'
			 WHERE id = ANY ($1)`, pgUUIDs(ids)); err != nil {
			b.Fatal(err)
		}
	}
	outs := func(ids []uuid.UUID, n int, status string) []outcome {
		out := make([]outcome, len(ids))
		for i, id := range ids {
			out[i] = outcome{ID: id, Attempt: n, Status: status, Code: &code, At: time.Now(), Took: 3 * time.Millisecond, Sent: true}
			if status == StatusPending {
				out[i].Delay = time.Millisecond
			}
		}
		return out
	}
	cpu0, cpuOK := backendCPU(backend)
	for b.Loop() {
		b.StopTimer()
		ids := make([]uuid.UUID, batch)
		for i := range ids {
			ids[i] = uuid.New()
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO webhook_deliveries (id, merchant_id, environment, event, body)
			SELECT id, 'm-' || (i % 8), 'test', 'payment.settled', '{}'::bytea
			  FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, i)`, pgUUIDs(ids)); err != nil {
			b.Fatal(err)
		}
		lease(ids)
		if attempt == 2 {
			if err := record(ctx, pool, outs(ids, 1, StatusPending)); err != nil {
				b.Fatal(err)
			}
			lease(ids)
		}
		b.StartTimer()
		if err := record(ctx, rec, outs(ids, attempt, StatusDelivered)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu1, _ := backendCPU(backend)
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&left); err != nil {
		b.Fatal(err)
	}
	if left != 0 {
		b.Fatalf("%d outcomes not recorded", left)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "us/outcome")
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N*batch), "pg-cpu-us/outcome")
	}
}

// backendCPU is the CPU time (user and system) a local server's backend
// process has used; ok is false when it is not on this machine.
func backendCPU(pid int) (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(raw)
	// pid (comm) state ppid ... utime(14) stime(15), in USER_HZ (100)
	close := strings.LastIndexByte(s, ')')
	if close < 0 || !strings.Contains(s[:close], "(postgres") {
		return 0, false
	}
	f := strings.Fields(s[close+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * (time.Second / 100), true
}
