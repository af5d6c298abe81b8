package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/audit"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

// One merchant at scale (docs/performance.md, "One merchant at
// scale"): BenchmarkScale builds a store of SCALE_EVENTS events (default
// 1,000,000) of one merchant, escrow lifecycles decided by the application
// and written through the event store in large batches (scaleGen), and
// measures what grows with a merchant's history:
//
//   - rebuild-events/s: `projections.RebuildAll` of every read model;
//   - audit-events/s and audit-peak-MB: `escrowd audit --merchant` as a
//     separate process (its maximum resident set), which must find the
//     store clean;
//   - the same two at a tenth of the size (the -small metrics), and the
//     ratio of the audit's peak memory at full size to that at a tenth,
//     which must stay within 2;
//   - cold-load-ms and cold-load-snapshot-ms: a cold load of a stream of
//     scaleLongStream events, without a snapshot and from one;
//   - whatever the functions in scaleMeasures report on the full store
//     (the listings' first and last pages plug in there).
//
// make bench runs it at the default size (minutes: the store is written
// first); SCALE_EVENTS=50000 make bench BENCH=Scale is a quick look.

// scaleEvents is the size of the scale benchmark's store: SCALE_EVENTS,
// 1,000,000 by default.
func scaleEvents(tb testing.TB) int64 {
	if v := os.Getenv("SCALE_EVENTS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			tb.Fatalf("SCALE_EVENTS=%q: want a positive number of events", v)
		}
		return n
	}
	return 1_000_000
}

// scaleLongStream is the length of the stream whose cold load is timed
// (about a second at 100,000 events without snapshots).
const scaleLongStream = 100_000

// scaleStore is the benchmark's full store, as a measurement receives it.
type scaleStore struct {
	URL        string // the database, for a server of its own
	Pool       *pgxpool.Pool
	Store      eventstore.Store
	Service    *app.Service // decides over Store directly
	Actor      app.Actor    // the merchant, test environment
	Keys       []app.IssuedKey
	MerchantID string
	Sellers    []string // its busiest customers: each sells 1/16 of the escrows
	Events     int64    // events in the store
}

// scaleMeasures are further measurements on the full store, run in order
// after the built-in ones; each reports its own metrics on b and registers
// from its own file: func init() { scaleMeasures = append(scaleMeasures, ...) }
// (the listings' pages: scale_listings_bench_test.go).
var scaleMeasures []func(b *testing.B, s *scaleStore)

func BenchmarkScale(b *testing.B) {
	full := scaleEvents(b)
	url := pgtest.NewURL(b)
	pool := pgtest.OpenPool(b, url)
	master := newScaleMaster(b)
	raw, store := scaleStores(b, pool, master)
	defer raw.Close()
	escrowd := buildEscrowd(b)
	masterFile := master.file(b)

	gen := newScaleGen(b, store)
	var small auditRun
	var smallRebuild float64
	for i, size := range []int64{full / 10, full} {
		began := time.Now()
		gen.fill(b, size)
		b.Logf("store filled to %d events (%s)", gen.written(), time.Since(began).Round(time.Second))
		// A history in service has been vacuumed and analyzed by
		// autovacuum; a store just written has not, and the first reads
		// of its rows would pay for setting their hint bits (and race the
		// autovacuum that a million new rows start).
		began = time.Now()
		if _, err := pool.Exec(context.Background(), `VACUUM (ANALYZE)`); err != nil {
			b.Fatal(err)
		}
		b.Logf("store vacuumed (%s)", time.Since(began).Round(time.Second))
		rate := benchRebuild(b, pool, store)
		// The same for the read models the rebuild just wrote: in
		// service, the audit reads tables that have long been vacuumed,
		// not rows whose hint bits its first read would set.
		if _, err := pool.Exec(context.Background(), `VACUUM`); err != nil {
			b.Fatal(err)
		}
		run := runAudit(b, escrowd, url, masterFile, gen.actor.MerchantID)
		b.Logf("at %d events: rebuild %.0f events/s; audit of %d events %.0f events/s, peak %.1f MB",
			gen.written(), rate, run.events, run.rate(), run.peakMB)
		if i == 0 {
			small, smallRebuild = run, rate
			continue
		}
		b.ReportMetric(float64(gen.written()), "events")
		b.ReportMetric(rate, "rebuild-events/s")
		b.ReportMetric(smallRebuild, "rebuild-small-events/s")
		b.ReportMetric(run.rate(), "audit-events/s")
		b.ReportMetric(run.peakMB, "audit-peak-MB")
		b.ReportMetric(small.rate(), "audit-small-events/s")
		b.ReportMetric(small.peakMB, "audit-small-peak-MB")
		ratio := run.peakMB / small.peakMB
		b.ReportMetric(ratio, "audit-peak-ratio")
		if ratio > 2 {
			b.Errorf("the audit's peak memory at %d events is %.1f times its peak at a tenth of them (at most 2)", gen.written(), ratio)
		}
	}

	without, with := benchColdLoad(b, raw)
	b.ReportMetric(without, "cold-load-ms")
	b.ReportMetric(with, "cold-load-snapshot-ms")
	b.Logf("cold load of %d events: %.1f ms from the first event, %.1f ms from a snapshot", scaleLongStream, without, with)

	s := &scaleStore{URL: url, Pool: pool, Store: store, Service: app.NewService(app.NewEngine(store, 10000)),
		Actor: gen.actor, Keys: gen.keys, MerchantID: gen.actor.MerchantID, Sellers: gen.sellers, Events: gen.written()}
	for _, measure := range scaleMeasures {
		measure(b, s)
	}
}

// scaleMaster is the master key of a scale store, as the base64 text of a
// master key file: the kept store keeps it beside its merchant.
type scaleMaster string

func newScaleMaster(b *testing.B) scaleMaster {
	b.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		b.Fatal(err)
	}
	return scaleMaster(base64.StdEncoding.EncodeToString(key))
}

// file writes the master key file the audit process reads.
func (m scaleMaster) file(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "master.key")
	if err := os.WriteFile(path, []byte(string(m)+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// scaleStores are the PostgreSQL store over pool and the sealing store
// over it, as every process has it (wiring.Sealed): a scale store is
// written, rebuilt and audited sealed, as one in service is.
func scaleStores(b *testing.B, pool *pgxpool.Pool, m scaleMaster) (*postgres.Store, eventstore.Store) {
	b.Helper()
	key, err := base64.StdEncoding.DecodeString(string(m))
	if err != nil {
		b.Fatal(err)
	}
	master, err := keyring.NewMaster(key)
	if err != nil {
		b.Fatal(err)
	}
	raw := postgres.New(pool)
	sealed, _ := wiring.Sealed(raw, pool, master)
	return raw, sealed
}

// benchRebuild rebuilds every read model from the log and returns the
// events read per second.
func benchRebuild(b *testing.B, pool *pgxpool.Pool, store eventstore.Store) float64 {
	b.Helper()
	var read int64
	began := time.Now()
	if err := projections.RebuildAll(context.Background(), pool, store, projections.All(wiring.Sealer(store)), nil, func(done, _ int64) { read = done }); err != nil {
		b.Fatal(err)
	}
	return float64(read) / time.Since(began).Seconds()
}

// buildEscrowd builds the command the audit runs as.
func buildEscrowd(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "escrowd")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/escrowd")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// auditRun is one `escrowd audit` process.
type auditRun struct {
	events int64
	took   time.Duration
	peakMB float64
}

func (r auditRun) rate() float64 { return float64(r.events) / r.took.Seconds() }

// runAudit runs `escrowd audit --merchant id --json` against the database
// at url, with the master key in masterFile; the store must be clean.
func runAudit(b *testing.B, escrowd, url, masterFile, id string) auditRun {
	b.Helper()
	cmd := exec.Command(escrowd, "audit", "--merchant", id, "--json")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "ESCROW_DATA_DIR="+b.TempDir(), "ESCROW_MASTER_KEY_FILE="+masterFile)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// The peak resident set of the audit's own image: VmHWM of the
	// process, read until it exits. (The rusage of a child started with
	// vfork, as Go starts them, counts the parent's pages too.)
	hwm := make(chan float64)
	done := make(chan struct{})
	go func() {
		var peak float64
		for {
			if kb, ok := vmHWM(cmd.Process.Pid); ok {
				peak = max(peak, kb/1024)
			}
			select {
			case <-done:
				hwm <- peak
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	took := time.Since(began)
	close(done)
	peakMB := <-hwm
	var rep audit.Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil || err != nil || !rep.Clean() {
		b.Fatalf("escrowd audit: %v %v\n%.2000s\n%.2000s", err, jerr, out.String(), errOut.String())
	}
	if peakMB == 0 {
		b.Fatal("no peak memory read for the audit process")
	}
	return auditRun{events: rep.Events, took: took, peakMB: peakMB}
}

// vmHWM reads the peak resident set (kB) of process pid from /proc.
func vmHWM(pid int) (float64, bool) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb, err == nil
		}
	}
	return 0, false
}

// benchColdLoad times a cold load (a new engine) of a customer stream of
// scaleLongStream events: without a snapshot, and from the snapshot that
// load writes. Each is the best of three, in milliseconds.
func benchColdLoad(b *testing.B, store *postgres.Store) (without, with float64) {
	b.Helper()
	ctx := context.Background()
	id := "scale-long"
	stream := app.CustomerKind.StreamName(id)
	fillCustomerStream(b, store, id, scaleLongStream)
	load := func(snapshots bool) float64 {
		best := time.Duration(1 << 62)
		for range 3 {
			if !snapshots {
				if _, err := store.Pool().Exec(ctx, `DELETE FROM es_snapshots WHERE stream_id = $1`, stream); err != nil {
					b.Fatal(err)
				}
			}
			e := app.NewEngine(store, 10)
			e.SnapshotEvery = 0 // time the load, not the write
			began := time.Now()
			if _, rev, err := app.Load(ctx, e, app.CustomerKind, id); err != nil || rev != scaleLongStream-1 {
				b.Fatal(rev, err)
			}
			best = min(best, time.Since(began))
		}
		return float64(best.Microseconds()) / 1000
	}
	without = load(false)
	// A load that reads past SnapshotEvery events writes a snapshot (in
	// the background).
	if _, _, err := app.Load(ctx, app.NewEngine(store, 10), app.CustomerKind, id); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, ok, err := store.ReadSnapshot(ctx, stream)
		if err != nil {
			b.Fatal(err)
		}
		if ok && s.Revision == scaleLongStream-1 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no snapshot of %s written", stream)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return without, load(true)
}
