package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// verdict collects what the checks found.
type verdict struct {
	lost, doubled int
	sum           int64 // over every account of every merchant, kobo
	violations    []string
	lines         []string // the report, printed whatever the outcome
}

func (v *verdict) fail(format string, args ...any) {
	v.violations = append(v.violations, fmt.Sprintf(format, args...))
}

func (v *verdict) say(format string, args ...any) {
	v.lines = append(v.lines, fmt.Sprintf(format, args...))
}

// mismatch counts an account found at got where want was expected: less
// money than acknowledged is lost, more is doubled.
func (v *verdict) mismatch(what string, want, got bal) {
	if got.main+got.escrow < want.main+want.escrow || (got.main+got.escrow == want.main+want.escrow && got.main < want.main) {
		v.lost++
	} else {
		v.doubled++
	}
	v.fail("%s: expected main %s escrow %s, found main %s escrow %s", what,
		money.Amount(want.main), money.Amount(want.escrow), money.Amount(got.main), money.Amount(got.escrow))
}

// checker runs the checks once everything is restarted and caught up.
type checker struct {
	f    *fleet
	c    *client
	pool *pgxpool.Pool
	w    *workload
	rcv  *receiver
	rng  *rand.Rand
	// sealer opens the read models' sealed values (the fleet's keys).
	sealer domain.Sealer
}

// readBalances reads a wallet through the API (the read waits for every
// projector to pass the newest committed event).
func (k *checker) readBalances(rng *rand.Rand, cl call) (bal, error) {
	r := k.c.do(rng, cl)
	if r.outcome != acked {
		return bal{}, fmt.Errorf("%s: %s %d %s", cl.path, r.outcome, r.status, r.message)
	}
	var d struct {
		Main   json.Number `json:"mainBalance"`
		Escrow json.Number `json:"escrowBalance"`
	}
	if err := json.Unmarshal(r.data, &d); err != nil {
		return bal{}, fmt.Errorf("%s: %v: %s", cl.path, err, r.data)
	}
	m, err1 := money.Parse(d.Main.String())
	e, err2 := money.Parse(d.Escrow.String())
	if err1 != nil || err2 != nil {
		return bal{}, fmt.Errorf("%s: balances %s %s", cl.path, d.Main, d.Escrow)
	}
	return bal{int64(m), int64(e)}, nil
}

// balances: every customer's wallet and every merchant's wallet equal
// what the operations that happened predict.
func (k *checker) balances(v *verdict) {
	failed := len(v.violations)
	// Every wallet, read eight at a time.
	type read struct {
		p   *op
		cid string
		b   bal
		err error
	}
	var reads []*read
	for _, p := range k.w.ops {
		for _, cid := range p.customers {
			reads = append(reads, &read{p: p, cid: cid})
		}
	}
	next := make(chan *read)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(rng *rand.Rand) {
			defer wg.Done()
			for r := range next {
				r.b, r.err = k.readBalances(rng, call{method: http.MethodGet, path: "/v1/wallet", key: r.p.m.std, cid: r.cid})
			}
		}(rand.New(rand.NewPCG(k.rng.Uint64(), uint64(i))))
	}
	for _, r := range reads {
		next <- r
	}
	close(next)
	wg.Wait()
	observed := map[string]bal{}
	for _, r := range reads {
		if r.err != nil {
			v.fail("%s: %v", r.p.name, r.err)
		}
		observed[cust(r.cid)] = r.b
	}
	merchantWant := map[string]bal{}
	for _, p := range k.w.ops {
		got := observed
		matches := func(d delta) bool {
			for _, cid := range p.customers {
				if got[cust(cid)] != d[cust(cid)] {
					return false
				}
			}
			return true
		}
		want := p.base
		if len(p.alts) > 0 {
			found := false
			for _, alt := range p.alts {
				if d := p.base.add(alt); matches(d) {
					want, found = d, true
					break
				}
			}
			if !found {
				want = p.base.add(p.alts[len(p.alts)-1])
			}
		}
		for _, cid := range p.customers {
			if got[cust(cid)] != want[cust(cid)] {
				v.mismatch(fmt.Sprintf("%s: customer %s", p.name, cid), want[cust(cid)], got[cust(cid)])
			}
		}
		for _, m := range k.w.merchants {
			b := want[merch(m.id)]
			mw := merchantWant[m.id]
			merchantWant[m.id] = bal{mw.main + b.main, mw.escrow + b.escrow}
		}
	}
	for _, m := range k.w.merchants {
		b, err := k.readBalances(k.rng, call{method: http.MethodGet, path: "/v1/merchant/balance", key: m.sa})
		if err != nil {
			v.fail("merchant %s: %v", m.id, err)
			continue
		}
		if b != merchantWant[m.id] {
			v.mismatch("merchant wallet "+m.id, merchantWant[m.id], b)
		}
	}
	v.say("balances: %d customer wallets and %d merchant wallets read, %d differ from the acknowledged operations",
		len(reads), len(k.w.merchants), len(v.violations)-failed)
}

// records: every step that happened wrote its transaction record exactly
// once; an unknown one at most once.
func (k *checker) records(ctx context.Context, v *verdict) {
	n, failed := 0, len(v.violations)
	for _, p := range k.w.ops {
		for _, rc := range p.refs {
			var count int
			q := `SELECT count(*) FROM rm_transactions WHERE merchant_id = $1 AND environment = 'test' AND customer_id = $2 AND reference = $3`
			arg := rc.reference
			if rc.reference == "" {
				q = `SELECT count(*) FROM rm_transactions WHERE merchant_id = $1 AND environment = 'test' AND customer_id = $2 AND transaction_type = $3`
				arg = rc.txType
			}
			if err := k.pool.QueryRow(ctx, q, rc.merchant, rc.customer, arg).Scan(&count); err != nil {
				v.fail("records: %v", err)
				return
			}
			n++
			what := fmt.Sprintf("%s: customer %s record %s%s", p.name, rc.customer, rc.reference, rc.txType)
			switch {
			case count > 1:
				v.doubled++
				v.fail("%s written %d times", what, count)
			case count == 0 && !rc.maybe:
				v.lost++
				v.fail("%s acknowledged but missing", what)
			}
		}
	}
	v.say("records: %d references of acknowledged steps looked up, %d not found exactly once", n, len(v.violations)-failed)
}

// customers: every customer create acknowledged (or answered as executed
// on a retry) made exactly one customer, an unknown one at most one, a
// refused one none: the existence oracle of requests that move no money.
func (k *checker) customers(ctx context.Context, v *verdict) {
	n, failed := 0, len(v.violations)
	// The emails are sealed: each merchant's are read and opened once,
	// and counted by their value.
	emails := map[string]map[string]int{}
	for _, p := range k.w.ops {
		for _, c := range p.creates {
			if emails[c.merchant] == nil {
				counts, err := k.emailsOf(ctx, c.merchant)
				if err != nil {
					v.fail("customers: %v", err)
					return
				}
				emails[c.merchant] = counts
			}
			count := emails[c.merchant][c.email]
			n++
			what := fmt.Sprintf("%s: customer create %s (%s)", p.name, c.email, c.outcome)
			switch {
			case count > 1:
				v.doubled++
				v.fail("%s made %d customers", what, count)
			case count == 0 && (c.outcome == acked || c.outcome == happened):
				v.lost++
				v.fail("%s acknowledged but no customer exists", what)
			case count == 1 && c.outcome == refused:
				v.fail("%s refused but the customer exists", what)
			}
		}
	}
	v.say("customers: %d creates looked up, %d not reflected as answered", n, len(v.violations)-failed)
}

// emailsOf counts the test-environment customers of merchant by email.
func (k *checker) emailsOf(ctx context.Context, merchant string) (map[string]int, error) {
	rows, err := k.pool.Query(ctx, `SELECT email FROM rm_customers WHERE merchant_id = $1 AND environment = 'test'`, merchant)
	if err != nil {
		return nil, err
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range kept {
		if domain.IsSealed(e) {
			if k.sealer == nil {
				return nil, fmt.Errorf("a sealed email and no keys to open it")
			}
			if e, err = k.sealer.Open(ctx, "rm_customers.email", e); err != nil {
				return nil, err
			}
		}
		out[e]++
	}
	return out, nil
}

// ledgerSums: the sum over every merchant's accounts is zero and no
// account but external clearing is negative.
func (k *checker) ledgerSums(ctx context.Context, v *verdict) {
	rows, err := k.pool.Query(ctx, `SELECT merchant_id, environment, sum(balance)::bigint FROM rm_balances GROUP BY 1, 2`)
	if err != nil {
		v.fail("sum: %v", err)
		return
	}
	for rows.Next() {
		var m, env string
		var s int64
		if err := rows.Scan(&m, &env, &s); err != nil {
			v.fail("sum: %v", err)
		}
		v.sum += s
		if s != 0 {
			v.fail("merchant %s/%s: accounts sum to %s", m, env, money.Amount(s))
		}
	}
	rows.Close()
	var negative int
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM rm_balances WHERE holder <> 'external' AND NOT (holder = 'platform' AND bucket = 'cost') AND balance < 0`).Scan(&negative); err != nil {
		v.fail("negative: %v", err)
	}
	if negative > 0 {
		// Money spent that was not there: paid out twice, in effect.
		v.doubled += negative
		v.fail("%d accounts below zero", negative)
	}
	v.say("ledger: the accounts sum to %s, %d below zero", money.Amount(v.sum), negative)
}

// audits: `escrowd audit` of every merchant, a replay of the whole log
// compared with the read models and the wallets.
func (k *checker) audits(v *verdict) {
	for _, m := range k.w.merchants {
		out, err := k.f.cli("audit", "--merchant", m.id)
		if err != nil {
			v.fail("audit of %s: %v", m.id, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		v.say("audit %s: %s", m.id, lines[len(lines)-1])
	}
}

// statusRow is a row of `escrowd projections status --json`.
type statusRow struct {
	projections.ProjectorStatus
	Installed bool `json:"installed"`
}

// caughtUp waits until every projector and the webhook subscriber have
// passed the log's head.
func (k *checker) caughtUp(timeout time.Duration) ([]statusRow, error) {
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.f.cli("projections", "status", "--json")
		var st struct {
			Projectors []statusRow `json:"projectors"`
		}
		if err == nil {
			err = json.Unmarshal(out, &st)
		}
		if err == nil {
			behind := ""
			for _, r := range st.Projectors {
				if r.Lag != 0 || !r.Installed {
					behind += fmt.Sprintf(" %s(lag %d)", r.Name, r.Lag)
				}
			}
			if behind == "" {
				return st.Projectors, nil
			}
			err = fmt.Errorf("behind:%s", behind)
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// webhookMessages: every settled transaction record of an announced type
// produced exactly one payment message, and every message in the outbox
// reached the receiver with a valid signature, waiting up to timeout for
// retries (a dispatcher killed mid-attempt holds its lease a minute).
func (k *checker) webhookMessages(ctx context.Context, v *verdict, timeout time.Duration) {
	rows, err := k.pool.Query(ctx, `SELECT record FROM rm_transactions WHERE environment = 'test'`)
	if err != nil {
		v.fail("webhooks: %v", err)
		return
	}
	want := map[string]string{} // record id -> message id
	for rows.Next() {
		var raw []byte
		var r ledger.Record
		if err := rows.Scan(&raw); err == nil {
			err = json.Unmarshal(raw, &r)
		}
		if err != nil {
			v.fail("webhooks: record: %v", err)
			continue
		}
		if r.Status.Settled() && webhooks.AnnouncedTypes[r.Type] {
			want[r.ID] = webhooks.PaymentMessageID(r).String()
		}
	}
	rows.Close()
	rows, err = k.pool.Query(ctx, `SELECT id::text, event, body FROM webhook_deliveries WHERE environment = 'test'`)
	if err != nil {
		v.fail("webhooks: %v", err)
		return
	}
	var all []string
	perRecord := map[string][]string{}
	for rows.Next() {
		var id, event string
		var body []byte
		if err := rows.Scan(&id, &event, &body); err != nil {
			v.fail("webhooks: %v", err)
			continue
		}
		all = append(all, id)
		if strings.HasPrefix(event, "payment.") {
			if body, err = webhooks.OpenBody(ctx, k.sealer, uuid.MustParse(id), body); err != nil {
				v.fail("webhooks: message %s: %v", id, err)
				continue
			}
			var env struct {
				Data struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			_ = json.Unmarshal(body, &env)
			perRecord[env.Data.ID] = append(perRecord[env.Data.ID], id)
		}
	}
	rows.Close()
	for rec, msg := range want {
		if got := perRecord[rec]; len(got) != 1 || got[0] != msg {
			v.fail("webhooks: settled record %s has messages %v, want exactly [%s]", rec, got, msg)
		}
	}
	for rec, got := range perRecord {
		if _, ok := want[rec]; !ok {
			v.fail("webhooks: messages %v for record %s, which is not a settled announced record", got, rec)
		}
	}
	deadline := time.Now().Add(timeout)
	var missing []string
	for {
		missing = missing[:0]
		for _, id := range all {
			if k.rcv.received(id) == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	sort.Strings(missing)
	for _, id := range missing {
		v.fail("webhooks: message %s never delivered with a valid signature", id)
	}
	k.rcv.mu.Lock()
	for _, b := range k.rcv.badSigs {
		v.fail("webhooks: bad signature: %.200s", b)
	}
	k.rcv.mu.Unlock()
	v.say("webhooks: %d settled records, %d payment messages; %d of %d messages delivered with a valid signature (%d first attempts failed on purpose)",
		len(want), len(perRecord), len(all)-len(missing), len(all), k.rcv.faults())
}

// readModelDigests is, per read model table of the live schema, its row
// count and a digest of its rows (without seq, the order rows arrived in,
// and with each sealed value as one word).
func (k *checker) readModelDigests(ctx context.Context) (map[string]string, error) {
	rows, err := k.pool.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_name LIKE 'rm\_%' ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	rows.Close()
	out := map[string]string{}
	for _, t := range tables {
		var n int64
		var digest *string
		// A sealed value is sealed again, with a fresh nonce, by a rebuild:
		// it is compared as being there, not by its bytes.
		q := fmt.Sprintf(`SELECT count(*), md5(string_agg(r, E'\n' ORDER BY r)) FROM (
			SELECT regexp_replace((to_jsonb(t) - 'seq')::text, '%s[^"\\]*', 'sealed', 'g') AS r FROM %s t) x`, domain.SealedPrefix,
			pgx.Identifier{t}.Sanitize())
		if err := k.pool.QueryRow(ctx, q).Scan(&n, &digest); err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		d := ""
		if digest != nil {
			d = *digest
		}
		out[t] = fmt.Sprintf("%d rows, digest %s", n, d)
	}
	return out, nil
}

// readModelsReplay: every read model, as the projectors kept it through
// the faults, equals a rebuild from the log (`escrowd projections
// rebuild`, a replay from position zero): a projector that skipped an
// event, or applied one twice, leaves a difference.
func (k *checker) readModelsReplay(ctx context.Context, v *verdict) {
	for attempt := 0; ; attempt++ {
		before, err := k.caughtUp(90 * time.Second)
		if err != nil {
			v.fail("read models: %v", err)
			return
		}
		live, err := k.readModelDigests(ctx)
		if err != nil {
			v.fail("read models: %v", err)
			return
		}
		if _, err := k.f.cli("projections", "rebuild"); err != nil {
			v.fail("read models: %v", err)
			return
		}
		after, err := k.caughtUp(90 * time.Second)
		if err != nil {
			v.fail("read models: %v", err)
			return
		}
		replayed, err := k.readModelDigests(ctx)
		if err != nil {
			v.fail("read models: %v", err)
			return
		}
		if before[0].Head != after[0].Head && attempt == 0 {
			continue // something wrote meanwhile (the payout resumer): again
		}
		for t, d := range live {
			if replayed[t] != d {
				v.fail("read model %s: live %s, replayed from the log %s", t, d, replayed[t])
			}
		}
		v.say("read models: %d tables compared with a rebuild from the log", len(live))
		return
	}
}
