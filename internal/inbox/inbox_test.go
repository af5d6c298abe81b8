package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/pgtest"
)

func put(t *testing.T, st Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := st.Put(context.Background(), Event{Provider: "paystack", Environment: domain.Test, ID: id, Name: "transfer.success", Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// Workers draining at once never take the same event: each is handled
// once, and a delivery repeated is kept once.
func TestWorkersShareTheInbox(t *testing.T) {
	st := Store{Pool: pgtest.NewPool(t)}
	var ids []string
	for i := range 60 {
		ids = append(ids, fmt.Sprint("e", i))
	}
	put(t, st, ids...)
	if fresh, err := st.Put(context.Background(), Event{Provider: "paystack", Environment: domain.Test, ID: "e1", Name: "x", Body: []byte(`{}`)}); err != nil || fresh {
		t.Fatalf("a delivery again: fresh %v, %v", fresh, err)
	}
	var mu sync.Mutex
	handled := map[string]int{}
	handle := func(_ context.Context, it Item) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		handled[it.ID]++
		return "ok", nil
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &Worker{Store: st, Handle: handle, Batch: 7}
			if _, err := w.Drain(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(handled) != len(ids) {
		t.Fatalf("handled %d events, want %d", len(handled), len(ids))
	}
	for id, n := range handled {
		if n != 1 {
			t.Fatalf("%s handled %d times", id, n)
		}
	}
	sum, err := st.Status(context.Background())
	if err != nil || sum.Pending != 0 || sum.Done != len(ids) {
		t.Fatalf("status %+v, %v", sum, err)
	}
}

// elapse moves the inbox's times back by d, as if the database's clock
// had run d ahead.
func elapse(t *testing.T, st Store, d time.Duration) {
	t.Helper()
	if _, err := st.Pool.Exec(context.Background(), `UPDATE provider_inbox SET due_at = due_at - $1::interval,
		received_at = received_at - $1::interval, processed_at = processed_at - $1::interval`, d); err != nil {
		t.Fatal(err)
	}
}

// A failing event is retried after its backoff, not before, and the
// others are handled meanwhile.
func TestFailingEventIsRetriedWithBackoff(t *testing.T) {
	st := Store{Pool: pgtest.NewPool(t)}
	put(t, st, "bad", "good")
	var mu sync.Mutex
	calls := map[string]int{}
	w := &Worker{Store: st,
		Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * time.Hour },
		Handle: func(_ context.Context, it Item) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			calls[it.ID]++
			if it.ID == "bad" && it.Attempt < 3 {
				return "", errors.New("provider timed out")
			}
			return "ok", nil
		}}
	if n, err := w.Drain(context.Background()); err != nil || n != 2 {
		t.Fatalf("first drain %d, %v", n, err)
	}
	sum, _ := st.Status(context.Background())
	if sum.Pending != 1 || sum.Done != 1 || len(sum.Failing) != 1 || sum.Failing[0].LastError != "provider timed out" || sum.Failing[0].Attempts != 1 {
		t.Fatalf("after one failure: %+v", sum)
	}
	if n, _ := w.Drain(context.Background()); n != 0 {
		t.Fatalf("retried before its backoff (%d)", n)
	}
	for _, d := range []time.Duration{time.Hour, 2 * time.Hour} {
		elapse(t, st, d-time.Minute)
		if n, _ := w.Drain(context.Background()); n != 0 {
			t.Fatalf("retried a minute before its backoff of %s ended (%d)", d, n)
		}
		elapse(t, st, time.Minute)
		if n, err := w.Drain(context.Background()); err != nil || n != 1 {
			t.Fatalf("drain after %s: %d, %v", d, n, err)
		}
	}
	sum, _ = st.Status(context.Background())
	if sum.Pending != 0 || sum.Done != 2 || calls["bad"] != 3 || calls["good"] != 1 {
		t.Fatalf("after the retries: %+v, calls %v", sum, calls)
	}
	// Pruning deletes what was processed longer ago than the retention
	// (good, three hours ago; not bad, just now), nothing pending.
	put(t, st, "later")
	if n, err := st.Prune(context.Background(), time.Hour); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want good only", n, err)
	}
	if sum, _ = st.Status(context.Background()); sum.Pending != 1 || sum.Done != 1 {
		t.Fatalf("after pruning: %+v", sum)
	}
}

// A provider's error text of any length is kept bounded, cut on a
// character boundary.
func TestRetryKeepsErrorsBounded(t *testing.T) {
	st := Store{Pool: pgtest.NewPool(t)}
	put(t, st, "e")
	items, err := st.Claim(context.Background(), 1, time.Minute)
	if err != nil || len(items) != 1 {
		t.Fatalf("claimed %v, %v", items, err)
	}
	long := strings.Repeat("é", 100_000)
	if _, err := st.Retry(context.Background(), items[0], errors.New(long), time.Hour); err != nil {
		t.Fatal(err)
	}
	sum, _ := st.Status(context.Background())
	if len(sum.Failing) != 1 || len(sum.Failing[0].LastError) > maxNote+len("…") || !utf8.ValidString(sum.Failing[0].LastError) {
		t.Fatalf("kept %d bytes: %+v", len(sum.Failing[0].LastError), sum.Failing)
	}
}

// An event whose handler is slow (its provider takes its time to answer)
// holds up neither the others of its claim nor the claims after it: the
// slow one waits for a fast one claimed after it to be handled. With one
// event per claim, a worker that finished a claim before taking the next
// would never reach the fast one.
func TestSlowEventDoesNotHoldUpOthers(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Worker
	}{
		{"one claim", Worker{}},
		{"later claims", Worker{Batch: 1, Concurrency: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Store{Pool: pgtest.NewPool(t)}
			put(t, st, "slow")
			put(t, st, "fast")
			fastDone := make(chan struct{})
			w := tc.w
			w.Store = st
			w.Handle = func(_ context.Context, it Item) (string, error) {
				if it.ID == "fast" {
					close(fastDone)
					return "ok", nil
				}
				select {
				case <-fastDone:
					return "ok", nil
				case <-time.After(30 * time.Second):
					return "", errors.New("the fast event was held up behind the slow one")
				}
			}
			if n, err := w.Drain(context.Background()); err != nil || n != 2 {
				t.Fatalf("drained %d, %v", n, err)
			}
			if sum, _ := st.Status(context.Background()); sum.Done != 2 || len(sum.Failing) != 0 {
				t.Fatalf("status %+v", sum)
			}
		})
	}
}

// No more than Concurrency events are processed at once, and Run fills
// every slot: each handler holds its slot until Concurrency of them run
// side by side.
func TestWorkerProcessesAtMostConcurrencyAtOnce(t *testing.T) {
	st := Store{Pool: pgtest.NewPool(t)}
	const conc = 4
	var ids []string
	for i := range 3 * conc {
		ids = append(ids, fmt.Sprint("e", i))
	}
	put(t, st, ids...)
	var mu sync.Mutex
	running, most, done := 0, 0, 0
	full := make(chan struct{})
	all := make(chan struct{})
	w := (&Worker{Store: st, Batch: 3, Concurrency: conc, Handle: func(ctx context.Context, it Item) (string, error) {
		mu.Lock()
		running++
		most = max(most, running)
		if running == conc && most == conc && done == 0 {
			close(full)
		}
		mu.Unlock()
		select {
		case <-full:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		mu.Lock()
		running--
		done++
		if done == len(ids) {
			close(all)
		}
		mu.Unlock()
		return "ok", nil
	}}).Init()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- w.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never had its slots full")
	}
	waitDone(t, st, len(ids))
	cancel()
	<-ran
	mu.Lock()
	defer mu.Unlock()
	if most != conc {
		t.Fatalf("%d events processed at once, want %d", most, conc)
	}
	if sum, _ := st.Status(context.Background()); sum.Done != len(ids) {
		t.Fatalf("status %+v", sum)
	}
}

// Two running workers on one database, woken as events are kept, handle
// each event once while events keep arriving.
func TestRunningWorkersHandleEachEventOnce(t *testing.T) {
	st := Store{Pool: pgtest.NewPool(t)}
	const events = 300
	var mu sync.Mutex
	handled := map[string]int{}
	total := 0
	all := make(chan struct{})
	handle := func(_ context.Context, it Item) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		handled[it.ID]++
		if total++; total == events {
			close(all)
		}
		return "ok", nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var workers []*Worker
	ran := make(chan error, 2)
	for range 2 {
		w := (&Worker{Store: st, Handle: handle, Batch: 5, Concurrency: 8, Interval: time.Hour}).Init()
		workers = append(workers, w)
		go func() { ran <- w.Run(ctx) }()
	}
	for i := range events {
		put(t, st, fmt.Sprint("e", i))
		workers[i%2].Notify()
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("handled %d of %d events", total, events)
	}
	waitDone(t, st, events)
	cancel()
	<-ran
	<-ran
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Fatalf("%s handled %d times", id, n)
		}
	}
	if len(handled) != events {
		t.Fatalf("handled %d events, want %d", len(handled), events)
	}
	if sum, _ := st.Status(context.Background()); sum.Done != events || sum.Pending != 0 {
		t.Fatalf("status %+v", sum)
	}
}

// waitDone waits for n events to be recorded done: a running worker
// records an outcome after its handler returns.
func waitDone(t *testing.T, st Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sum, err := st.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if sum.Done == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events recorded done", sum.Done, n)
		}
	}
}

// TestStoppingWorkerRecordsEventsInHand: events whose handlers finish
// after the worker is told to stop are still recorded done (their money
// moved), and Run returns only once they are.
func TestStoppingWorkerRecordsEventsInHand(t *testing.T) {
	st := Store{Pool: pgtest.NewPool(t)}
	ids := []string{"s1", "s2", "s3", "s4", "s5"}
	put(t, st, ids...)
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(len(ids))
	w := &Worker{Store: st, Handle: func(context.Context, Item) (string, error) {
		started.Done()
		<-release
		return "credited", nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	started.Wait()
	cancel()
	close(release)
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	sum, err := st.Status(context.Background())
	if err != nil || sum.Done != len(ids) || sum.Pending != 0 {
		t.Fatalf("after stopping: %+v %v", sum, err)
	}
	var outcomes int
	if err := st.Pool.QueryRow(context.Background(), `SELECT count(*) FROM provider_inbox WHERE outcome = 'credited' AND processed_at IS NOT NULL`).Scan(&outcomes); err != nil || outcomes != len(ids) {
		t.Fatalf("%d outcomes recorded, %v", outcomes, err)
	}
}
