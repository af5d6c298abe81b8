package chaos

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain/domaintest"
	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

// operations is the workload's mix: each entry is one money operation
// from start to end on customers of its own, with its weight. Adding an
// operation (vaults, say) is one function like opTransfer and one line
// here.
var operations = []operation{
	{"transfer", 3, opTransfer},
	{"contended transfers", 2, opContendedTransfers},
	{"withdrawal", 2, opWithdrawal},
	{"failing withdrawal", 2, opFailingWithdrawal},
	{"escrow confirm", 3, opEscrowConfirm},
	{claimName, 1, opEscrowClaim},
	{"dispute COMPLETED", 1, opDispute("COMPLETED")},
	{"dispute REFUNDED", 1, opDispute("REFUNDED")},
	{"dispute SPLIT", 1, opDispute("SPLIT")},
	{"milestones", 2, opMilestones},
	{"vault winner", 1, opVault(true)},
	{"vault cancel", 1, opVault(false)},
	{"dedicated account deposit", 2, opDedicatedDeposit},
	{"card escrow payment", 2, opCardEscrow},
}

type operation struct {
	name   string
	weight int
	run    func(*op)
}

const claimName = "escrow claim"

// claimWait is how long after payment an escrow with a one-minute
// delivery window can be claimed (with a margin).
const claimWait = 62 * time.Second

// kobo amounts.
func naira(n int64) int64 { return n * 100 }

// bal is an account's expected (or observed) main and escrow balances.
type bal struct{ main, escrow int64 }

// delta is a change to accounts: "c:<customer>" wallets and "m:<merchant>"
// the merchant's wallet.
type delta map[string]bal

func (d delta) add(o delta) delta {
	out := delta{}
	for k, v := range d {
		out[k] = v
	}
	for k, v := range o {
		b := out[k]
		out[k] = bal{b.main + v.main, b.escrow + v.escrow}
	}
	return out
}

func cust(id string) string  { return "c:" + id }
func merch(id string) string { return "m:" + id }

// refCheck is a transaction record a step must have written: the
// customer's records of the reference (or, with no reference, of the
// type), exactly once if the step happened, at most once if unknown.
type refCheck struct {
	merchant, customer, reference, txType string
	maybe                                 bool
}

// op is one run of an operation and what it expects: base is the change
// of every step that happened; when a step ended unknown the operation
// stops there and alts are the changes it may have made on top (nothing,
// or the step's change).
type op struct {
	name      string
	w         *workload
	rng       *rand.Rand
	m         *merchantKeys
	customers []string
	base      delta
	alts      []delta
	refs      []refCheck
	// anomalies are requests refused that the workload expected to pass.
	anomalies []string
	// retryRefusals are requests refused only when retried after an
	// attempt without answer; booked as unknown (at most once).
	retryRefusals []string
	// creates are the customers the operation asked for, each by its
	// unique email address: acknowledged ones must exist exactly once,
	// unknown ones at most once, refused ones not at all.
	creates []createCheck
}

// createCheck is a customer create and what became of it.
type createCheck struct {
	merchant, email string
	outcome         outcome
}

type merchantKeys struct {
	id, std, sa, secret string
}

// workload runs operations on workers until its deadline.
type workload struct {
	t         testing.TB
	c         *client
	merchants []*merchantKeys
	until     time.Time
	phones    atomic.Int64
	claiming  atomic.Bool // a claim is waiting out its delivery window
	good      string      // a NUBAN that pays out
	failing   string      // a NUBAN ending in 0000: the test payout fails
	mu        sync.Mutex
	ops       []*op
	counts    map[string]int
	// mix is the operations run (default operations).
	mix []operation
	// sim is the test environment's provider, when the instances run on
	// the Paystack simulator (the provider operations need it).
	sim *paystacksim.Sim
}

func newWorkload(t testing.TB, c *client, merchants []*merchantKeys) *workload {
	return &workload{t: t, c: c, merchants: merchants, counts: map[string]int{},
		good: domaintest.NUBAN(t, "058", "77", false), failing: domaintest.NUBAN(t, "058", "66", true)}
}

// run starts workers until the deadline; operations under way finish.
func (w *workload) run(workers int, seed uint64, duration time.Duration) {
	start := time.Now()
	w.until = start.Add(duration)
	var wg sync.WaitGroup
	mix := w.mix
	if mix == nil {
		mix = operations
	}
	total := 0
	for _, o := range mix {
		total += o.weight
	}
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; time.Now().Before(w.until); n++ {
				var o operation
				claim := false
				if idx := n*workers + i; idx < len(mix) {
					// The first round runs every operation once, whatever
					// the duration (the claim too).
					o = mix[idx]
					if o.name == claimName {
						claim = true
						w.claiming.Store(true)
					}
				} else {
					// A claim holds its worker for claimWait: one at a time,
					// and none that would outlast the workload.
					for o = pick(rng, mix, total); o.name == claimName; o = pick(rng, mix, total) {
						if time.Until(w.until) >= claimWait && w.claiming.CompareAndSwap(false, true) {
							claim = true
							break
						}
					}
				}
				p := &op{name: o.name, w: w, rng: rng, m: w.merchants[rng.IntN(len(w.merchants))], base: delta{}}
				o.run(p)
				if claim {
					w.claiming.Store(false)
				}
				w.mu.Lock()
				w.ops = append(w.ops, p)
				w.counts[o.name]++
				w.mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
}

func pick(rng *rand.Rand, mix []operation, total int) operation {
	n := rng.IntN(total)
	for _, o := range mix {
		if n < o.weight {
			return o
		}
		n -= o.weight
	}
	panic("unreachable")
}

// step sends one request whose change is d when it happens; it reports
// whether the operation may go on.
func (p *op) step(cl call, d delta, refs ...refCheck) (result, bool) {
	r := p.w.c.do(p.rng, cl)
	return r, p.account(r, cl, d, "", refs...)
}

// account books a request's result: what happened joins base, an unknown
// one doubles the alternatives (with and without it), a refusal other
// than mayRefuse is an anomaly.
func (p *op) account(r result, cl call, d delta, mayRefuse string, refs ...refCheck) bool {
	switch r.outcome {
	case acked, happened:
		p.base = p.base.add(d)
		p.refs = append(p.refs, refs...)
		return true
	case unknown:
		if r.refusedOnRetry && r.message != mayRefuse {
			p.retryRefusals = append(p.retryRefusals, fmt.Sprintf("%s: %s %s answered %d %q to a retry with its key",
				p.name, cl.method, cl.path, r.status, r.message))
		}
		if p.alts == nil {
			p.alts = []delta{{}}
		}
		for _, a := range p.alts {
			p.alts = append(p.alts, a.add(d))
		}
		for _, rc := range refs {
			rc.maybe = true
			p.refs = append(p.refs, rc)
		}
		return false
	}
	if mayRefuse == "" || r.message != mayRefuse {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: %s %s refused %d %q", p.name, cl.method, cl.path, r.status, r.message))
	}
	return false
}

// need is a step whose response the operation needs to go on (a created
// id): only an acknowledgement lets it continue.
func (p *op) need(cl call, d delta) (map[string]any, bool) {
	r, ok := p.step(cl, d)
	if !ok || r.outcome != acked {
		return nil, false
	}
	return r.obj(), true
}

func (p *op) std(method, path, cid string, body any) call {
	cl := call{method: method, path: path, key: p.m.std, cid: cid}
	if body != nil {
		cl.body = jsonBody(body)
	}
	return cl
}

// customer creates a customer of its own for the operation and tops its
// wallet up by topUp naira (if not zero); "" if that did not work out.
func (p *op) customer(topUp int64) (id, phone string) {
	n := p.w.phones.Add(1)
	phone = fmt.Sprintf("0803%07d", n)
	email := fmt.Sprintf("c%d@chaos.test", n)
	r, _ := p.step(call{method: http.MethodPost, path: "/v1/customer/create", key: p.m.sa,
		body: jsonBody(map[string]any{"firstname": "Ada", "lastname": "Obi", "email": email, "phone": phone})}, nil)
	p.creates = append(p.creates, createCheck{merchant: p.m.id, email: email, outcome: r.outcome})
	if r.outcome != acked {
		return "", ""
	}
	id, _ = r.obj()["customerId"].(string)
	p.customers = append(p.customers, id)
	if topUp > 0 {
		if _, ok := p.step(p.std("POST", "/v1/payment/topup", id, map[string]any{"amount": topUp}),
			delta{cust(id): {naira(topUp), 0}}, refCheck{merchant: p.m.id, customer: id, txType: "deposit"}); !ok {
			return "", ""
		}
	}
	return id, phone
}

func (p *op) ref() string { return "chaos-" + newKey()[:20] }

func opTransfer(p *op) {
	a, _ := p.customer(20000)
	b, phone := p.customer(0)
	if a == "" || b == "" {
		return
	}
	for i := 0; i < 2; i++ {
		amount, ref := int64(1000+p.rng.IntN(4000)), p.ref()
		if _, ok := p.need(p.std("POST", "/v1/payment/create-intent", a, map[string]any{"reference": ref, "amount": amount,
			"transactionType": "wallet_transfer", "walletDetails": map[string]any{"phone": phone, "narration": "chaos"}}), nil); !ok {
			return
		}
		if _, ok := p.step(p.std("POST", "/v1/payment/verify", a, map[string]any{"reference": ref}),
			delta{cust(a): {-naira(amount), 0}, cust(b): {naira(amount), 0}},
			refCheck{merchant: p.m.id, customer: a, reference: ref}); !ok {
			return
		}
	}
}

// opContendedTransfers verifies eight staged transfers of 2,000 from one
// wallet of 10,000 at once, each its own request: at most five fit, and
// only the wallet's expected revision keeps a sixth from overdrawing it.
func opContendedTransfers(p *op) {
	a, _ := p.customer(10000)
	b, phone := p.customer(0)
	if a == "" || b == "" {
		return
	}
	const n, amount = 8, 2000
	refs := make([]string, n)
	for i := range refs {
		refs[i] = p.ref()
		if _, ok := p.need(p.std("POST", "/v1/payment/create-intent", a, map[string]any{"reference": refs[i], "amount": amount,
			"transactionType": "wallet_transfer", "walletDetails": map[string]any{"phone": phone}}), nil); !ok {
			return
		}
	}
	calls := make([]call, n)
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = p.std("POST", "/v1/payment/verify", a, map[string]any{"reference": refs[i]})
		rng := rand.New(rand.NewPCG(p.rng.Uint64(), uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = p.w.c.do(rng, calls[i])
		}()
	}
	wg.Wait()
	for i, r := range results {
		p.account(r, calls[i], delta{cust(a): {-naira(amount), 0}, cust(b): {naira(amount), 0}}, "Insufficient balance",
			refCheck{merchant: p.m.id, customer: a, reference: refs[i]})
	}
}

// withdraw pays amount out to account; the test provider pays any account
// but those ending in 0000, whose payout fails and is reversed (fee
// included), leaving the wallet as it was. On the Paystack simulator the
// workload settles the payout there instead (withdrawAtProvider).
func (p *op) withdraw(account string, fails bool) {
	a, _ := p.customer(20000)
	if a == "" {
		return
	}
	amount, ref := int64(1000+p.rng.IntN(5000)), p.ref()
	if _, ok := p.need(p.std("POST", "/v1/payment/create-intent", a, map[string]any{"reference": ref, "amount": amount,
		"transactionType": "withdrawal", "withdrawalDetails": map[string]any{"accountNumber": account, "bankCode": "058", "narration": "chaos"}}), nil); !ok {
		return
	}
	if p.w.sim != nil {
		p.withdrawAtProvider(a, ref, amount, fails)
		return
	}
	d := delta{cust(a): {-naira(amount) - 50*100, 0}}
	if fails {
		d = delta{}
	}
	r, ok := p.step(p.std("POST", "/v1/payment/verify", a, map[string]any{"reference": ref}), d,
		refCheck{merchant: p.m.id, customer: a, reference: ref})
	if !ok {
		if r.outcome == unknown && fails {
			// Debited and not yet reversed is a state the wallet may be
			// left in (the payout resumer reverses it a minute later).
			p.alts = append(p.alts, delta{cust(a): {-naira(amount) - 50*100, 0}})
		}
		return
	}
	if want := map[bool]string{false: "success", true: "reversed"}[fails]; r.outcome == acked && r.obj()["status"] != want {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: withdrawal %s status %v, want %s", p.name, ref, r.obj()["status"], want))
	}
}

func opWithdrawal(p *op)        { p.withdraw(p.w.good, false) }
func opFailingWithdrawal(p *op) { p.withdraw(p.w.failing, true) }

// paidEscrow creates a standard escrow of 10,000 (fee 250, paid by the
// buyer: due 10,250) sold by a new seller and paid by a new buyer from a
// wallet of 20,000. After payment the buyer's escrow balance holds 10,250.
func (p *op) paidEscrow(window string) (id, token, buyer, seller string, ok bool) {
	seller, _ = p.customer(0)
	buyer, _ = p.customer(20000)
	if seller == "" || buyer == "" {
		return "", "", "", "", false
	}
	e, ok := p.need(p.std("POST", "/v1/escrow/create", seller, map[string]any{"amount": 10000, "purpose": "Phone",
		"whoPays": "buyer", "maxDelivery": 1, "deliveryTimeline": window}), nil)
	if !ok {
		return "", "", "", "", false
	}
	id, _ = e["id"].(string)
	token, _ = e["paymentToken"].(string)
	ref := p.ref()
	_, ok = p.step(p.std("POST", "/v1/payment/escrow", buyer, map[string]any{"amount": 10250, "reference": ref,
		"transactionType": "escrow", "gateway": "wallet", "escrowDetails": map[string]any{"escrowId": id}}),
		delta{cust(buyer): {-naira(10250), naira(10250)}}, refCheck{merchant: p.m.id, customer: buyer, reference: ref})
	return id, token, buyer, seller, ok
}

// settled is the change when a paid 10,000 escrow settles: the held
// 10,250 leaves the buyer's escrow balance, sellerGets goes to the seller,
// buyerGets back to the buyer, the merchant earns its commission (125).
func (p *op) settled(buyer, seller string, sellerGets, buyerGets int64) delta {
	return delta{cust(buyer): {naira(buyerGets), -naira(10250)}, cust(seller): {naira(sellerGets), 0}, merch(p.m.id): {naira(125), 0}}
}

func opEscrowConfirm(p *op) {
	id, _, buyer, seller, ok := p.paidEscrow("days")
	if !ok {
		return
	}
	p.step(p.std("POST", "/v1/escrow/confirm-payment/"+id, buyer, nil), p.settled(buyer, seller, 10000, 0))
}

func opEscrowClaim(p *op) {
	_, token, buyer, seller, ok := p.paidEscrow("minutes")
	if !ok {
		return
	}
	time.Sleep(claimWait)
	claim := call{method: http.MethodGet, path: "/v1/escrow/claim-funds/" + token, key: p.m.std, cid: seller}
	r := p.w.c.do(p.rng, claim)
	for i := 0; i < 10 && r.outcome == refused && r.message == "Escrow cannot be claimed yet"; i++ {
		time.Sleep(2 * time.Second) // early by the server's clock
		r = p.w.c.do(p.rng, claim)
	}
	p.account(r, claim, p.settled(buyer, seller, 10000, 0), "")
}

// opDispute: the buyer disputes a paid escrow, the seller answers, the
// merchant rules. The pool is the amount less the seller's fee share
// (none: the buyer pays the fee), 10,000.
func opDispute(status string) func(*op) {
	return func(p *op) {
		id, token, buyer, seller, ok := p.paidEscrow("days")
		if !ok {
			return
		}
		for _, party := range []string{buyer, seller} {
			body, ct := form(map[string]string{"message": "chaos dispute"})
			if _, ok := p.step(call{method: "POST", path: "/v1/escrow/submit-dispute/" + token, key: p.m.std, cid: party,
				body: body, contentType: ct}, nil); !ok {
				return
			}
		}
		ruling := map[string]any{"status": status, "resolution": "chaos"}
		var d delta
		switch status {
		case "COMPLETED":
			d = p.settled(buyer, seller, 10000, 0)
		case "REFUNDED":
			d = p.settled(buyer, seller, 0, 10000)
		case "SPLIT":
			s := int64(1 + p.rng.IntN(9999))
			ruling["sellerAmount"], ruling["buyerAmount"] = s, 10000-s
			d = p.settled(buyer, seller, s, 10000-s)
		}
		p.step(p.std("POST", "/v1/escrow/dispute/resolve/"+id, "", ruling), d)
	}
}

// opMilestones: a 10,000 milestone escrow released in two parts, 4,000
// then 6,000; fee and commission come with the last.
func opMilestones(p *op) {
	seller, _ := p.customer(0)
	buyer, _ := p.customer(20000)
	if seller == "" || buyer == "" {
		return
	}
	e, ok := p.need(p.std("POST", "/v1/escrow/milestone/create", seller, map[string]any{"amount": 10000, "purpose": "Website",
		"whoPays": "buyer", "maxDelivery": 30, "deliveryTimeline": "days", "milestones": []map[string]any{
			{"title": "Design", "amount": 4000}, {"title": "Build", "amount": 6000}}}), nil)
	if !ok {
		return
	}
	id, _ := e["id"].(string)
	ms, _ := e["milestones"].([]any)
	if len(ms) != 2 {
		p.anomalies = append(p.anomalies, fmt.Sprintf("%s: created %v", p.name, e))
		return
	}
	ref := p.ref()
	if _, ok := p.step(p.std("POST", "/v1/payment/escrow", buyer, map[string]any{"amount": 10250, "reference": ref,
		"transactionType": "escrow", "gateway": "wallet", "escrowDetails": map[string]any{"escrowId": id}}),
		delta{cust(buyer): {-naira(10250), naira(10250)}}, refCheck{merchant: p.m.id, customer: buyer, reference: ref}); !ok {
		return
	}
	first, _ := ms[0].(map[string]any)["id"].(string)
	if _, ok := p.step(p.std("POST", "/v1/escrow/milestone/confirm/"+id+"/"+first, buyer, nil),
		delta{cust(buyer): {0, -naira(4000)}, cust(seller): {naira(4000), 0}}); !ok {
		return
	}
	last, _ := ms[1].(map[string]any)["id"].(string)
	p.step(p.std("POST", "/v1/escrow/milestone/confirm/"+id+"/"+last, buyer, nil),
		delta{cust(buyer): {0, -naira(6250)}, cust(seller): {naira(6000), 0}, merch(p.m.id): {naira(125), 0}})
}

// opVault: three customers stake 400 each in a vault of 1,200 (fee 30,
// the merchant's commission 15); then the merchant names a winner, who
// gets the pool less the fee, or cancels it, and each gets 390 back (the
// fee shared equally).
func opVault(winner bool) func(*op) {
	return func(p *op) {
		const stake = 400
		var ids []string
		var stakes []map[string]any
		staked := delta{}
		for i := 0; i < 3; i++ {
			id, _ := p.customer(1000)
			if id == "" {
				return
			}
			ids = append(ids, id)
			stakes = append(stakes, map[string]any{"customerId": id, "amount": stake})
			staked[cust(id)] = bal{-naira(stake), naira(stake)}
		}
		v, ok := p.need(p.std("POST", "/v1/escrow/vault/create", "", map[string]any{"purpose": "Chaos pool",
			"description": "chaos", "participants": stakes}), staked)
		if !ok {
			return
		}
		token, _ := v["paymentToken"].(string)
		settled := delta{merch(p.m.id): {naira(15), 0}}
		if winner {
			w := ids[p.rng.IntN(len(ids))]
			for _, id := range ids {
				settled[cust(id)] = bal{0, -naira(stake)}
			}
			settled[cust(w)] = bal{naira(3*stake - 30), -naira(stake)}
			p.step(p.std("POST", "/v1/escrow/vault/winner/"+token, "", map[string]any{"winnerId": w}), settled)
			return
		}
		for _, id := range ids {
			settled[cust(id)] = bal{naira(stake - 10), -naira(stake)}
		}
		p.step(p.std("POST", "/v1/escrow/vault/cancel/"+token, "", nil), settled)
	}
}

// form is a multipart body of fields.
func form(fields map[string]string) ([]byte, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	_ = w.Close()
	return buf.Bytes(), w.FormDataContentType()
}
