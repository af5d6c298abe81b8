package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
)

var (
	duration = flag.Duration("chaos.duration", 40*time.Second, "how long the workload runs (make chaos: 10m)")
	workers  = flag.Int("chaos.workers", 6, "concurrent operations")
	seed     = flag.Uint64("chaos.seed", 0, "random seed (0: from the clock; printed)")
	every    = flag.Duration("chaos.fault-every", 0, "time between faults (0: a quarter of the faulty part of the run, at most 20 s)")
)

// TestChaos runs the workload against three escrowd instances on a
// PostgreSQL of its own while it kills instances and restarts the
// database, then checks that the money is exactly what was acknowledged.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes about two minutes")
	}
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos: seed %d, workload %s, %d workers", s, *duration, *workers)
	rng := rand.New(rand.NewPCG(s, 1))

	root, err := os.MkdirTemp("", "escrowd-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })      // runs last: after every process is gone
	if err := os.Chmod(root, 0o755); err != nil { // the postgres user must reach its data directory
		t.Fatal(err)
	}
	began := time.Now()
	// The build (seconds on a busy machine) and initdb overlap.
	built := make(chan string, 1)
	var buildErr error
	go func() {
		bin, err := buildEscrowd(root)
		buildErr = err
		built <- bin
	}()
	pg := startCluster(t, root)
	bin := <-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	t.Logf("chaos: escrowd built and PostgreSQL up in %s", time.Since(began).Round(time.Second))
	f := newFleet(t, bin, root, pg.URL())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance logs (last lines):\n%s", f.logTails(15))
		}
	})
	if _, err := f.cli("migrate"); err != nil {
		t.Fatal(err)
	}
	rcv, err := startReceiver(s, 0.15)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcv.close)
	merchants := make([]*merchantKeys, 2)
	var setup sync.WaitGroup
	setupErrs := make([]error, len(merchants))
	for i := range merchants {
		setup.Add(1)
		go func() {
			defer setup.Done()
			m, err := createMerchant(f, fmt.Sprintf("chaos-%d", i))
			if err == nil {
				_, err = f.cli("merchant", "set-webhook", "--merchant", m.id, "--env", "test", "--url", rcv.url+"/hook/"+m.id)
			}
			if err == nil {
				rcv.addMerchant(m.id, m.secret)
			}
			merchants[i], setupErrs[i] = m, err
		}()
	}
	setup.Wait()
	for _, err := range setupErrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The test environment's provider: the Paystack simulator, its events
	// through a proxy over the instances.
	hooks, err := startProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hooks.close)
	sim, simEnv, err := startProvider(hooks.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	f.env = append(f.env, simEnv...)
	// The roles spread over three processes: two run projectors, two run
	// the webhook subscriber and dispatcher, all three the API.
	f.add("api,projector")
	f.add("api,webhooks")
	f.add("api,projector,webhooks")
	if err := f.waitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	hooks.backends = f.apiAddrs()
	t.Logf("chaos: set up in %s", time.Since(began).Round(time.Second))

	// A request without an answer after 3 s is retried with its key; one
	// still without a final answer is given up as unknown after retryFor.
	// Long runs wait out the 2-minute takeover of a key whose request died
	// with its instance, so they exercise the fenced takeover too.
	retryFor := 20 * time.Second
	if *duration >= 5*time.Minute {
		retryFor = 150 * time.Second
	}
	c := newClient(f.apiAddrs(), 3*time.Second, retryFor)
	w := newWorkload(t, c, merchants)
	w.sim = sim

	// Short runs put their faults in the first half: a dispatcher killed
	// mid-attempt holds its lease for a minute, which the end must wait out.
	faultEvery, faultsFor := *every, *duration/2
	if *duration >= 5*time.Minute {
		faultsFor = *duration * 3 / 4
	}
	if faultEvery == 0 {
		faultEvery = min(faultsFor/4, 20*time.Second)
	}
	inj := &injector{f: f, pg: pg, rng: rand.New(rand.NewPCG(s, 2))}
	stop := make(chan struct{})
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		defer faults.Done()
		inj.run(stop, faultEvery, time.Now().Add(faultsFor))
	}()
	w.run(*workers, s, *duration)
	close(stop)
	faults.Wait()
	if inj.err != nil {
		t.Fatal(inj.err)
	}
	t.Logf("chaos: workload done after %s", time.Since(began).Round(time.Second))

	// Everything restarted and caught up before any check.
	if err := f.waitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	k := &checker{f: f, c: newClient(f.apiAddrs(), 10*time.Second, 60*time.Second), pool: pool, w: w, rcv: rcv, rng: rng, sealer: f.sealer(pool)}
	v := &verdict{}
	ctx := context.Background()
	checking := time.Now()
	if err := k.providerSettled(ctx, 3*time.Minute); err != nil {
		v.fail("provider events: %v", err)
	}
	rows, err := k.caughtUp(90 * time.Second)
	if err != nil {
		v.fail("projectors not caught up: %v", err)
	} else {
		names := make([]string, len(rows))
		for i, r := range rows {
			names[i] = r.Name
		}
		v.say("projectors: %s all at the head %s, none behind", strings.Join(names, ", "), rows[0].Head)
	}
	k.balances(v)
	k.records(ctx, v)
	k.customers(ctx, v)
	k.ledgerSums(ctx, v)
	k.providerMoney(ctx, v)
	// The rebuild and the audits replay the log while the webhook check
	// waits for retries.
	audited := &verdict{}
	auditsDone := make(chan struct{})
	go func() {
		defer close(auditsDone)
		k.readModelsReplay(ctx, audited)
		k.audits(audited)
	}()
	k.webhookMessages(ctx, v, 90*time.Second)
	<-auditsDone
	v.lines = append(v.lines, audited.lines...)
	v.violations = append(v.violations, audited.violations...)

	var counts []string
	unknown, anomalies := 0, 0
	var retryRefusals []string
	for _, p := range w.ops {
		if len(p.alts) > 0 {
			unknown++
		}
		for _, a := range p.anomalies {
			anomalies++
			v.fail("unexpected refusal: %s", a)
		}
		retryRefusals = append(retryRefusals, p.retryRefusals...)
	}
	if len(retryRefusals) > 0 {
		// Not a money violation (the step is checked as unknown: at most
		// once), but a retry should get the first execution's answer.
		v.say("retries refused after an attempt without answer (the first may have run): %d", len(retryRefusals))
		for _, r := range retryRefusals {
			v.say("  %s", r)
		}
	}
	for name, n := range w.counts {
		counts = append(counts, fmt.Sprintf("%s %d", name, n))
	}
	for _, o := range operations {
		if w.counts[o.name] == 0 {
			v.fail("the workload never ran %s", o.name)
		}
	}
	sort.Strings(counts)
	nFaults := inj.kills + inj.restarts + rcv.faults() + int(c.timeouts.Load())
	for _, l := range append([]string{
		fmt.Sprintf("operations: %s (%d left unknown by a fault, each checked as at most once)", strings.Join(counts, ", "), unknown),
		fmt.Sprintf("requests: %d sent, %d acknowledged, %d retried with the same key", c.sent.Load(), c.acks.Load(), c.retried.Load()),
		fmt.Sprintf("faults: %d kill -9, %d database restarts, %d instance exits restarted, %d webhook receiver faults, %d client timeouts",
			inj.kills, inj.restarts, f.exits, rcv.faults(), c.timeouts.Load()),
	}, v.lines...) {
		fmt.Println(l)
	}
	for _, msg := range v.violations {
		fmt.Println("VIOLATION:", msg)
	}
	fmt.Printf("chaos: %d requests, %d faults, %d lost, %d doubled, sum %s\n", c.sent.Load(), nFaults, v.lost, v.doubled, moneyAmount(v.sum))
	t.Logf("chaos: checked in %s, finished after %s", time.Since(checking).Round(time.Second), time.Since(began).Round(time.Second))
	if len(v.violations) > 0 {
		t.Fatalf("%d violations", len(v.violations))
	}
	if inj.kills < 3 || inj.restarts < 1 {
		t.Fatalf("only %d kills and %d database restarts: the run proves too little", inj.kills, inj.restarts)
	}
}

// createMerchant runs `escrowd merchant create --json` and keeps its test
// keys and signing secret.
func createMerchant(f *fleet, name string) (*merchantKeys, error) {
	out, err := f.cli("merchant", "create", "--name", name, "--json")
	if err != nil {
		return nil, err
	}
	var cm app.CreatedMerchant
	if err := json.Unmarshal(out, &cm); err != nil {
		return nil, fmt.Errorf("merchant create: %v: %s", err, out)
	}
	m := &merchantKeys{id: cm.MerchantID, secret: cm.SigningSecrets[domain.Test]}
	for _, k := range cm.Keys {
		if k.Environment != domain.Test {
			continue
		}
		switch k.Role {
		case merchant.Standard:
			m.std = k.Key
		case merchant.SuperAdmin:
			m.sa = k.Key
		}
	}
	if m.std == "" || m.sa == "" || m.secret == "" {
		return nil, fmt.Errorf("merchant create: no test keys or secret in %s", out)
	}
	return m, nil
}

// injector injects the process and database faults.
type injector struct {
	f               *fleet
	pg              *cluster
	rng             *rand.Rand
	kills, restarts int
	err             error
}

// run injects a fault every interval until stop or until faultsEnd (the
// rest of the workload runs without new faults, so what they left behind
// settles while traffic goes on). The first four are fixed,
// kill, kill, database, kill, so even a short run has the minimum; then
// seven in ten are kills.
func (in *injector) run(stop <-chan struct{}, every time.Duration, faultsEnd time.Time) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		if time.Now().After(faultsEnd) && n >= 4 {
			continue
		}
		db := n == 2 || (n > 3 && in.rng.IntN(10) >= 7)
		if db {
			in.pg.immediateStop()
			time.Sleep(time.Duration(500+in.rng.IntN(1500)) * time.Millisecond)
			if err := in.pg.start(); err != nil {
				in.err = err
				return
			}
			in.restarts++
			continue
		}
		i := in.f.insts[in.rng.IntN(len(in.f.insts))]
		in.f.kill9(i, time.Duration(200+in.rng.IntN(1300))*time.Millisecond)
		in.kills++
	}
}

func moneyAmount(k int64) string { return money.Amount(k).String() }
