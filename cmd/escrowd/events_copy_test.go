package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
	"github.com/escrowd/escrowd/eventstore/kurrent/kurrenttest"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// readLog is a store's whole log in order.
func readLog(t *testing.T, s eventstore.Store) []eventstore.RecordedEvent {
	t.Helper()
	var out []eventstore.RecordedEvent
	for after := eventstore.Start; ; {
		evs, err := s.ReadAll(context.Background(), after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		after = evs[len(evs)-1].Position
	}
}

// catchUp runs the read models' runner on env until it has applied head.
func catchUp(t *testing.T, env *cliEnv, head eventstore.Position) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := projections.NewRunner(env.Store, env.Pool, nopLogger(), env.Projectors...)
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- r.Run(runCtx) }()
	if err := r.WaitFor(ctx, head); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
}

// TestEventsCopyToKurrent: the copy puts every stream into KurrentDB with
// its revisions, in the source's order, checks it, and runs again as a
// no-op; --switch moves the checkpoints so that the read models and the
// webhook subscriber resume on the copy where they stopped.
func TestEventsCopyToKurrent(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	out, err := cli(t, db, "merchant", "create", "--name", "Acme", "--business", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MerchantID string `json:"merchantId"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	// A transaction over two streams, and more events on one of them.
	a, b := "copy-a-"+uuid.NewString()[:8], "copy-b-"+uuid.NewString()[:8]
	ev := func(typ string) []eventstore.EventData {
		return []eventstore.EventData{{ID: uuid.New(), Type: typ, Data: []byte(`{"n": 1, "s":"é"}`), Metadata: []byte(`{"merchantId":"` + m.MerchantID + `"}`)}}
	}
	if _, err := env.Store.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: ev("A")},
		eventstore.StreamAppend{Stream: b, Expected: eventstore.NoStream, Events: append(ev("B"), ev("B")...)}); err != nil {
		t.Fatal(err)
	}
	res, err := env.Store.Append(ctx, eventstore.StreamAppend{Stream: a, Expected: eventstore.Exact(0), Events: ev("A")})
	if err != nil {
		t.Fatal(err)
	}
	head := res.Position
	catchUp(t, env, head)
	if _, err := webhooks.Install(ctx, env.Store, env.Pool); err != nil {
		t.Fatal(err)
	}

	srv := kurrenttest.Serve(t)
	dst, err := kurrent.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)

	out, err = cli(t, db, "events", "copy", "--to", "kurrent", "--url", srv.URL())
	if err != nil || !strings.Contains(out, "checkpoints not moved") {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	// The copy is the log as stored: its sealed fields stay sealed.
	src, copied := readLog(t, env.Raw), readLog(t, dst)
	if len(copied) != len(src) {
		t.Fatalf("copy holds %d events; the source %d", len(copied), len(src))
	}
	for i, w := range src {
		g := copied[i]
		if g.ID != w.ID || g.Stream != w.Stream || g.Revision != w.Revision || g.Type != w.Type || string(g.Data) != string(w.Data) || string(g.Metadata) != string(w.Metadata) {
			t.Fatalf("event %d: copy %+v; source %+v", i, g, w)
		}
	}
	// Again, now with the switch: the copied events are repeats.
	out, err = cli(t, db, "events", "copy", "--to", "kurrent", "--url", srv.URL(), "--switch")
	if err != nil || !strings.Contains(out, "checkpoints to the copy's positions") {
		t.Fatalf("copy --switch: %v\n%s", err, out)
	}
	if n := len(readLog(t, dst)); n != len(src) {
		t.Fatalf("a repeated copy left %d events; want %d", n, len(src))
	}
	kurrentHead, err := dst.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cps, err := env.Pool.Query(ctx, `SELECT name, commit_pos, prepare_pos FROM projection_checkpoints`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for cps.Next() {
		var (
			name   string
			cp, pp int64
		)
		if err := cps.Scan(&name, &cp, &pp); err != nil {
			t.Fatal(err)
		}
		if (eventstore.Position{Commit: uint64(cp), Prepare: uint64(pp)}) != kurrentHead {
			t.Errorf("checkpoint %s at %d/%d after the switch; want the copy's head %v", name, cp, pp, kurrentHead)
		}
		n++
	}
	cps.Close()
	if n < 2 {
		t.Fatalf("%d checkpoints; want the read models' and the webhook subscriber's", n)
	}

	// The service on the copy: a new merchant reaches the read models from
	// the moved checkpoints.
	t.Setenv("ESCROW_EVENT_STORE", "kurrent")
	t.Setenv("KURRENTDB_URL", srv.URL())
	kenv, closeEnv, err := openEnv(ctx, mustConfig(t, db), nopLogger(), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEnv()
	created, err := app.NewService(app.NewEngine(kenv.Store, 10)).CreateMerchant(ctx, "Next", true, "NG", func(k string) string { return "d-" + k })
	if err != nil {
		t.Fatal(err)
	}
	catchUp(t, kenv, created.Position)
	if country, err := projections.NewQueries(kenv.Pool, nil).MerchantCountry(ctx, created.MerchantID); err != nil || country != "NG" {
		t.Fatalf("the merchant created on the copy: country %q, %v", country, err)
	}
}

// TestEventsCopyRefusesAForeignStream: a destination stream that holds
// other events where the copy would go fails the copy, naming it, and
// nothing of that transaction is written.
func TestEventsCopyRefusesAForeignStream(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	stream := "copy-" + uuid.NewString()[:8]
	if _, err := env.Store.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "Mine", Data: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	srv := kurrenttest.Serve(t)
	dst, err := kurrent.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	if _, err := dst.Append(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.New(), Type: "Theirs", Data: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	_, err = cli(t, db, "events", "copy", "--to", "kurrent", "--url", srv.URL())
	if err == nil || !strings.Contains(err.Error(), stream) {
		t.Fatalf("copy onto a foreign stream: %v; want an error naming %s", err, stream)
	}
	if evs, _ := dst.ReadStream(ctx, stream, 0, 0); len(evs) != 1 || evs[0].Type != "Theirs" {
		t.Fatalf("the foreign stream holds %+v", evs)
	}
}
