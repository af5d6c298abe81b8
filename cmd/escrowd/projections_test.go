package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

func statusRows(t *testing.T, db string) map[string]statusRow {
	t.Helper()
	out, err := cli(t, db, "projections", "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var report statusReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if report.Horizon == nil {
		t.Fatalf("no horizon for a PostgreSQL store: %s", out)
	}
	byName := map[string]statusRow{}
	for _, r := range report.Projectors {
		byName[r.Name] = r
	}
	if len(byName) != len(projections.All(nil))+1 {
		t.Fatalf("status lists %d rows, want every read model and the webhook subscriber: %s", len(byName), out)
	}
	return byName
}

// TestProjectionsStatusShowsWebhookSubscriber: status lists the webhook
// subscriber's checkpoint and lag, marked as such and not rebuildable, and
// rebuild refuses it.
func TestProjectionsStatusShowsWebhookSubscriber(t *testing.T) {
	db := pgtest.NewURL(t)
	if _, err := cli(t, db, "merchant", "create", "--name", "Acme"); err != nil {
		t.Fatal(err)
	}
	rows := statusRows(t, db)
	sub, ok := rows[webhooks.SubscriberName]
	if !ok || sub.Kind != kindSubscriber || sub.Rebuildable || sub.Installed {
		t.Fatalf("subscriber before webhooks ran: %+v", sub)
	}
	if m := rows["merchants"]; m.Kind != kindReadModel || !m.Rebuildable || !m.Installed || m.Lag != 0 {
		t.Fatalf("merchants read model: %+v", m)
	}
	table, err := cli(t, db, "projections", "status")
	if err != nil {
		t.Fatal(err)
	}
	line := lineOf(table, webhooks.SubscriberName+" ")
	if !strings.Contains(table, "KIND") || !strings.Contains(line, "webhook subscriber") || !strings.Contains(line, "not installed") {
		t.Fatalf("status table:\n%s", table)
	}

	// Webhooks turned on: the subscriber starts at the head; it is not
	// running, so what happens next is its lag.
	env := testEnv(t, db)
	installed, err := webhooks.Install(context.Background(), env.Store, env.Pool)
	if err != nil {
		t.Fatal(err)
	}
	sub = statusRows(t, db)[webhooks.SubscriberName]
	if !sub.Installed || sub.Checkpoint != installed || sub.Active || sub.Lag < 0 {
		t.Fatalf("installed subscriber: %+v (installed at %s)", sub, installed)
	}
	before := sub.Lag
	if _, err := cli(t, db, "merchant", "create", "--name", "Beta"); err != nil {
		t.Fatal(err)
	}
	rows = statusRows(t, db)
	sub = rows[webhooks.SubscriberName]
	if sub.Checkpoint != installed || sub.Lag <= before || sub.Lag != countSince(t, env, installed, sub.Head) {
		t.Fatalf("subscriber behind the log: %+v", sub)
	}
	if rows["merchants"].Lag != 0 {
		t.Fatalf("merchants read model: %+v", rows["merchants"])
	}
	table, err = cli(t, db, "projections", "status")
	if err != nil {
		t.Fatal(err)
	}
	// In words: events behind and when it last moved, not positions.
	if line := lineOf(table, webhooks.SubscriberName+" "); !strings.Contains(line, fmt.Sprintf("  %d events behind  ", sub.Lag)) ||
		strings.Contains(table, installed.String()) || strings.Contains(table, sub.Head.String()) {
		t.Fatalf("status table:\n%s", table)
	}
	if line := lineOf(table, "merchants "); !strings.Contains(line, "  up to date  ") || !strings.Contains(line, " ago)") && !strings.Contains(line, "(just now)") {
		t.Fatalf("status table:\n%s", table)
	}

	_, err = cli(t, db, "projections", "rebuild", webhooks.SubscriberName)
	var ue usageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "webhook subscriber") || !strings.Contains(err.Error(), "cannot be rebuilt") {
		t.Fatalf("rebuild webhooks: %v", err)
	}
	if got := statusRows(t, db)[webhooks.SubscriberName]; got.Checkpoint != installed {
		t.Fatalf("refused rebuild moved the checkpoint: %+v", got)
	}
	if _, err := cli(t, db, "projections", "rebuild", "nope"); err == nil || strings.Contains(err.Error(), webhooks.SubscriberName) {
		t.Fatalf("unknown projection: %v", err)
	}
}

func lineOf(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// countSince counts the events in (after, upTo] of the PostgreSQL store.
func countSince(t *testing.T, env *cliEnv, after, upTo eventstore.Position) int64 {
	t.Helper()
	var n int64
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM es_events
		WHERE (tx_id, seq) > ($1::text::xid8, $2) AND (tx_id, seq) <= ($3::text::xid8, $4)`,
		fmt.Sprint(after.Commit), int64(after.Prepare), fmt.Sprint(upTo.Commit), int64(upTo.Prepare)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServeReportsWebhookSubscriber: with the webhooks role, /readyz
// checks the subscriber's lag and /metrics has the outbox gauges.
func TestServeReportsWebhookSubscriber(t *testing.T) {
	db := pgtest.NewURL(t)
	port, metricsPort := freePort(t), freePort(t)
	t.Setenv("ESCROW_LOG_FORMAT", "console")
	t.Setenv("ESCROW_WEBHOOK_RETENTION", "48h")
	t.Setenv("ESCROW_METRICS_ADDR", fmt.Sprintf("127.0.0.1:%d", metricsPort))
	if _, err := cli(t, db, "merchant", "create", "--name", "Acme"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		if err := run(ctx, []string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port)}, io.Discard, io.Discard); err != nil {
			t.Error(err)
		}
	})
	getAt := func(port int, path string) (int, string) {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	get := func(path string) (int, string) { return getAt(port, path) }
	waitUntil(t, "ready with the webhook subscriber's lag", func() bool {
		code, body := get("/readyz")
		return code == 200 && strings.Contains(body, `"webhookLag":0`) && strings.Contains(body, `"projectionLag":0`)
	})
	if code, _ := get("/metrics"); code != http.StatusNotFound {
		t.Fatalf("the API's address answers /metrics: %d", code)
	}
	waitUntil(t, "the outbox gauges", func() bool {
		_, body := getAt(metricsPort, "/metrics")
		return strings.Contains(body, "escrowd_webhook_outbox_pending 0") &&
			strings.Contains(body, "escrowd_webhook_outbox_oldest_pending_age_seconds 0") &&
			strings.Contains(body, "escrowd_webhook_outbox_failed 0") &&
			strings.Contains(body, "escrowd_eventstore_horizon_held_events ") &&
			strings.Contains(body, "escrowd_eventstore_horizon_held_seconds ") &&
			strings.Contains(body, `escrowd_eventstore_appends_total{sent="alone"} `) &&
			strings.Contains(body, `escrowd_eventstore_appends_total{sent="grouped"} `) &&
			strings.Contains(body, "escrowd_eventstore_group_calls_total ") &&
			strings.Contains(body, `escrowd_http_requests_total{method="GET",route="/readyz",status="200"}`)
	})
}

// TestProjectionsStatusExplainsHeldHorizon: with a transaction that
// appended left open, committed events are held back from every read model
// while each lag reads zero; `projections status` says how
// many events are held and for how long, names the session, and says how to
// let them through. Its JSON carries the same.
func TestProjectionsStatusExplainsHeldHorizon(t *testing.T) {
	db := pgtest.NewURL(t)
	if _, err := cli(t, db, "merchant", "create", "--name", "Before"); err != nil {
		t.Fatal(err)
	}
	other, end := pgtest.OpenLogWriter(t, db)
	// `merchant create` would wait for its read model, which cannot see
	// it now: five events of a stream nothing projects stand in for it.
	env := testEnv(t, db)
	held := make([]eventstore.EventData, 5)
	for i := range held {
		held[i] = eventstore.EventData{ID: uuid.New(), Type: "held", Data: []byte(`{}`)}
	}
	if _, err := env.Store.Append(context.Background(), eventstore.StreamAppend{Stream: "held-" + uuid.NewString(), Expected: eventstore.NoStream, Events: held}); err != nil {
		t.Fatal(err)
	}
	// The status explains a hold once it has lasted horizonExplainAfter.
	var out string
	waitUntil(t, "the status explaining the hold", func() bool {
		var err error
		if out, err = cli(t, db, "projections", "status"); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(out, "Held by: pid ")
	})
	for _, want := range []string{"committed events held back for", "behind every projector",
		"Held by: pid ", "pgtest-open-log-writer", other, "pg_terminate_backend"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	raw, err := cli(t, db, "projections", "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var report statusReport
	if err := json.Unmarshal([]byte(raw), &report); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if h := report.Horizon; h == nil || h.Held < 5 || h.HeldForMs < horizonExplainAfter.Milliseconds() || !strings.Contains(h.Blocker, other) {
		t.Fatalf("JSON horizon: %s", raw)
	}
	// The same names as /readyz's horizon.
	for _, name := range []string{`"heldEvents":`, `"heldForMs":`, `"blockedBy":`} {
		if !strings.Contains(raw, name) {
			t.Fatalf("JSON horizon lacks %s: %s", name, raw)
		}
	}
	end()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := cli(t, db, "projections", "status")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "Horizon: no committed event is held back.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still held after the session ended:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHorizonMetrics: the horizon gauges show events held behind a
// log writer left open, and fall back to 0 when it ends.
func TestHorizonMetrics(t *testing.T) {
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newHorizonCollector(env.Store.(eventstore.HorizonReporter)))
	gauges := func() (held, seconds float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
		}
		if len(got) != 2 {
			t.Fatalf("gauges %v, want the two horizon gauges", got)
		}
		return got["escrowd_eventstore_horizon_held_events"], got["escrowd_eventstore_horizon_held_seconds"]
	}
	_, end := pgtest.OpenLogWriter(t, db)
	held := make([]eventstore.EventData, 3)
	for i := range held {
		held[i] = eventstore.EventData{ID: uuid.New(), Type: "held", Data: []byte(`{}`)}
	}
	if _, err := env.Store.Append(context.Background(), eventstore.StreamAppend{Stream: "held-" + uuid.NewString(), Expected: eventstore.NoStream, Events: held}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gauges showing 3 events held for 0.2 s", func() bool {
		n, secs := gauges()
		return n >= 3 && secs >= 0.2
	})
	end()
	waitUntil(t, "the horizon gauges back at 0", func() bool {
		n, secs := gauges()
		return n == 0 && secs == 0
	})
}

// askedHorizon is a HorizonReporter that records what it was asked and
// answers a full count.
type askedHorizon struct {
	limit        int64
	explainAfter time.Duration
}

func (a *askedHorizon) Horizon(_ context.Context, limit int64, explainAfter time.Duration) (eventstore.Horizon, error) {
	a.limit, a.explainAfter = limit, explainAfter
	return eventstore.Horizon{Held: limit, HeldFor: 3 * time.Second}, nil
}

// A scrape counts held events no further than `projections status` does,
// never asks who blocks them, and its help says where the count stops:
// counting is a scrape's cost, and one that outlasts its 2 s exports no
// gauge at all, so a high cap would make the gauges vanish while a
// horizon stays stuck.
func TestHorizonScrapeCountIsCapped(t *testing.T) {
	asked := &askedHorizon{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newHorizonCollector(asked))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if asked.limit <= 0 || asked.limit > horizonCountLimit {
		t.Fatalf("a scrape counts up to %d held events; want at most %d, as projections status", asked.limit, horizonCountLimit)
	}
	if asked.explainAfter < 24*time.Hour {
		t.Fatalf("a scrape asks for the blocker of a horizon held %v", asked.explainAfter)
	}
	for _, mf := range mfs {
		if mf.GetName() != "escrowd_eventstore_horizon_held_events" {
			continue
		}
		if v := mf.GetMetric()[0].GetGauge().GetValue(); v != float64(asked.limit) {
			t.Fatalf("held events gauge %v, want the count %d", v, asked.limit)
		}
		if want := fmt.Sprintf("counted up to %d", asked.limit); !strings.Contains(mf.GetHelp(), want) {
			t.Fatalf("help %q does not say %q", mf.GetHelp(), want)
		}
		return
	}
	t.Fatal("no held events gauge")
}

// printHorizon says "or more" once the count reached horizonCountLimit,
// where Horizon stops counting (so the count never exceeds it), and only
// then; the oldest open transaction is named when the store found it.
func TestPrintHorizon(t *testing.T) {
	for _, c := range []struct {
		h    eventstore.Horizon
		want []string
		not  []string
	}{
		{eventstore.Horizon{}, []string{"Horizon: no committed event is held back."}, []string{"or more", "Held by"}},
		{eventstore.Horizon{Held: horizonCountLimit - 1, HeldFor: 1500 * time.Millisecond},
			[]string{fmt.Sprintf("Horizon: %d committed events held back for 1.5s,", horizonCountLimit-1)},
			[]string{"or more", "Held by"}},
		{eventstore.Horizon{Held: horizonCountLimit, HeldFor: 2 * time.Second, Blocker: "pid 42 in database other"},
			[]string{fmt.Sprintf("Horizon: %d or more committed events held back for 2s,", horizonCountLimit),
				"Held by: pid 42 in database other"}, nil},
	} {
		var out strings.Builder
		printHorizon(&out, c.h)
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%+v: output %q lacks %q", c.h, out.String(), w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("%+v: output %q has %q", c.h, out.String(), n)
			}
		}
	}
}
