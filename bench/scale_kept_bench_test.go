package bench

import (
	"context"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/migrations"
)

// BenchmarkScaleKept measures the rebuild and the audit on a store kept
// from one run to the next (docs/performance.md, "One merchant at
// scale"). One BenchmarkScale pass moves with the host far more than a
// change of the code does, and writing its store takes a minute, so two
// builds are compared on one kept store, run alternately.
//
// SCALE_KEPT names the store's database on the DATABASE_URL server; the
// benchmark skips without it. The first run creates the database and
// fills it as BenchmarkScale does (SCALE_EVENTS events); later runs reuse
// it, and a store whose filling did not finish is written again from
// scratch. Each run rebuilds every read model, vacuums (untimed, as
// BenchmarkScale does), and audits the merchant with `escrowd audit` built
// from the checkout it runs in. It reports each one's events/s, the CPU
// the whole machine used meanwhile (both cores, PostgreSQL included) and
// the steal, and the audit's peak memory.
func BenchmarkScaleKept(b *testing.B) {
	name := os.Getenv("SCALE_KEPT")
	if name == "" {
		b.Skip("SCALE_KEPT is not set: the name of a database to keep the store in")
	}
	if !regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`).MatchString(name) {
		b.Fatalf("SCALE_KEPT=%q: want a lower-case database name", name)
	}
	ctx := context.Background()
	dbURL, merchantID, events, master := keptStore(b, name)
	pool := pgtest.OpenPool(b, dbURL)
	raw, store := scaleStores(b, pool, master)
	defer raw.Close()
	escrowd := buildEscrowd(b)
	masterFile := master.file(b)
	b.Logf("kept store %s: %d events of merchant %s", name, events, merchantID)

	before := sampleCPU(name)
	rate := benchRebuild(b, pool, store)
	rebuilt := cpuSince(before, name, 1)
	rebuildMachine := machineBusy(before, sampleCPU(name))
	if _, err := pool.Exec(ctx, `VACUUM`); err != nil {
		b.Fatal(err)
	}
	before = sampleCPU(name)
	run := runAudit(b, escrowd, dbURL, masterFile, merchantID)
	audited := cpuSince(before, name, 1)
	auditMachine := machineBusy(before, sampleCPU(name))

	b.ReportMetric(float64(events), "events")
	b.ReportMetric(rate, "rebuild-events/s")
	b.ReportMetric(rebuildMachine.Seconds(), "rebuild-machine-cpu-s")
	b.ReportMetric(rebuilt.selfPerOp.Seconds(), "rebuild-go-cpu-s")
	b.ReportMetric(run.rate(), "audit-events/s")
	b.ReportMetric(auditMachine.Seconds(), "audit-machine-cpu-s")
	b.ReportMetric(run.peakMB, "audit-peak-MB")
	b.ReportMetric(max(rebuilt.stealPct, audited.stealPct), "steal-%")
	b.Logf("rebuild %.0f events/s (machine CPU %.1f s); audit %.0f events/s (machine CPU %.1f s, peak %.1f MB); steal %.1f%%",
		rate, rebuildMachine.Seconds(), run.rate(), auditMachine.Seconds(), run.peakMB, max(rebuilt.stealPct, audited.stealPct))
}

// keptStore returns the kept store's URL, its merchant, its events and
// its master key, creating and filling the database first if it has no
// finished store (a store kept without its master key was written plain,
// by a build that did not seal, and is written again).
func keptStore(b *testing.B, name string) (dbURL, merchantID string, events int64, master scaleMaster) {
	b.Helper()
	ctx := context.Background()
	server := pgtest.ServerURL(b)
	u, err := url.Parse(server)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	dbURL = u.String()
	// A finished store records its merchant last (scaleKeptTable). It is
	// brought up to this build's migrations, as a deployment would be.
	if conn, err := pgx.Connect(ctx, dbURL); err == nil {
		err = conn.QueryRow(ctx, `SELECT merchant_id, events, master_key FROM bench_scale_kept`).Scan(&merchantID, &events, &master)
		_ = conn.Close(ctx)
		if err == nil {
			if err := migrations.Up(ctx, pgtest.OpenPool(b, dbURL)); err != nil {
				b.Fatal(err)
			}
			return dbURL, merchantID, events, master
		}
	}
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx) //nolint:errcheck
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		b.Fatal(err)
	}
	pool := pgtest.OpenPool(b, dbURL)
	if err := migrations.Up(ctx, pool); err != nil {
		b.Fatal(err)
	}
	master = newScaleMaster(b)
	raw, store := scaleStores(b, pool, master)
	defer raw.Close()
	gen := newScaleGen(b, store)
	began := time.Now()
	gen.fill(b, scaleEvents(b))
	// As BenchmarkScale: a history in service has been vacuumed.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
		b.Fatal(err)
	}
	events = gen.written()
	if _, err := pool.Exec(ctx, scaleKeptTable); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_scale_kept VALUES ($1, $2, $3)`, gen.actor.MerchantID, events, string(master)); err != nil {
		b.Fatal(err)
	}
	b.Logf("kept store %s written: %d events (%s)", name, events, time.Since(began).Round(time.Second))
	return dbURL, gen.actor.MerchantID, events, master
}

// scaleKeptTable holds the kept store's merchant and master key, written
// once the store is whole. (A benchmark's store only: a master key is
// never kept in the database it protects.)
const scaleKeptTable = `CREATE TABLE bench_scale_kept (merchant_id text NOT NULL, events bigint NOT NULL, master_key text NOT NULL)`

// machineBusy is the CPU time the whole machine spent between two samples
// (every core, neither idle nor stolen).
func machineBusy(before, after cpuSample) time.Duration {
	busy := func(s cpuSample) int64 { return s.total - s.idle - s.steal }
	return time.Duration(busy(after)-busy(before)) * time.Second / clkTck
}
