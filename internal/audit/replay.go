package audit

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/ledger"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/domain/wallet"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/projector"
)

// balanceKey is one account of the merchant: accounts are scoped by the
// movement's environment.
type balanceKey struct {
	env  domain.Environment
	acct ledger.Account
}

func (k balanceKey) less(o balanceKey) bool {
	if k.env != o.env {
		return k.env < o.env
	}
	return k.acct.String() < o.acct.String()
}

// replay folds the merchant's events into what its read models and
// wallets must show, recording every invariant broken on the way. What it
// keeps in memory is per account (balances, customers, wallets); the
// transaction records, which grow with the history, are folded a page at
// a time into a table (records).
type replay struct {
	merchantID string
	balances   map[balanceKey]money.Amount
	sums       map[domain.Environment]money.Amount
	wallets    map[string]wallet.State // the merchant's wallet streams, by customer id
	customers  map[string]bool         // the merchant's customers
	writes     []recordWrite           // the page's record versions, in order
	diffs      []Difference

	events, entries, movements int64
}

func newReplay(merchantID string) *replay {
	return &replay{
		merchantID: merchantID,
		balances:   map[balanceKey]money.Amount{},
		sums:       map[domain.Environment]money.Amount{},
		wallets:    map[string]wallet.State{},
		customers:  map[string]bool{},
	}
}

func (r *replay) report(d Difference) { r.diffs = append(r.diffs, d) }

func at(p eventstore.Position) *eventstore.Position { return &p }

// metaMerchant is the merchant an event's metadata names.
func metaMerchant(re eventstore.RecordedEvent) string {
	m, _, _ := eventstore.TenantOf(re.Metadata)
	return m
}

// apply replays one event of the global log.
func (r *replay) apply(re eventstore.RecordedEvent) {
	r.events++
	if cid, ok := strings.CutPrefix(re.Stream, app.WalletKind.Name+"-"); ok {
		r.applyWallet(cid, re)
		return
	}
	e, ok, err := projector.DecodeEntry(re)
	if err != nil {
		// Another merchant's unreadable event is that merchant's audit's.
		if metaMerchant(re) == r.merchantID {
			r.report(Difference{Check: CheckEvent, Position: at(re.Position),
				Detail: "cannot decode " + re.Type + " of " + re.Stream + ": " + err.Error()})
		}
		return
	}
	if !ok {
		return
	}
	eff := e.Ledger()
	m := eff.Movement
	mine := m != nil && m.MerchantID == r.merchantID
	for _, rec := range eff.Records {
		mine = mine || rec.MerchantID == r.merchantID
	}
	if !mine {
		return
	}
	r.entries++
	if m != nil && m.MerchantID != r.merchantID {
		r.report(Difference{Check: CheckEvent, Position: at(re.Position),
			Detail: re.Type + " of " + re.Stream + " moves another merchant's money with this merchant's records"})
	}
	for _, rec := range eff.Records {
		if rec.MerchantID != r.merchantID {
			r.report(Difference{Check: CheckEvent, Position: at(re.Position), RecordID: rec.ID,
				Detail: re.Type + " of " + re.Stream + " writes a record of another merchant"})
		}
	}
	if m != nil && m.MerchantID == r.merchantID {
		r.applyMovement(re.Position, *m)
	}
	for _, rec := range eff.Records {
		if rec.MerchantID == r.merchantID {
			r.applyRecord(re.Position, rec)
		}
	}
}

// applyMovement checks a movement and adds it to the balances, the way the
// ledger read model does (a malformed movement is still applied, so that it
// is reported once, here, and not again as a balance difference).
func (r *replay) applyMovement(pos eventstore.Position, m ledger.Movement) {
	r.movements++
	if err := m.Validate(); err != nil {
		r.report(Difference{Check: CheckMovement, Position: at(pos), Environment: m.Environment, Detail: err.Error()})
	}
	deltas := m.Deltas()
	keys := make([]balanceKey, 0, len(deltas))
	for a := range deltas {
		keys = append(keys, balanceKey{m.Environment, a})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	var sum money.Amount
	for _, k := range keys {
		d := deltas[k.acct]
		sum += d
		before := r.balances[k]
		after := before + d
		r.balances[k] = after
		if k.acct.Holder == ledger.HolderCustomer {
			r.customers[k.acct.ID] = true
		}
		// Reported when the account crosses below zero, not at every
		// movement while it stays there.
		if after < 0 && before >= 0 && !k.acct.MayGoNegative() {
			r.report(Difference{Check: CheckNegative, Position: at(pos), Environment: k.env, Account: k.acct.String(),
				Expected: "at least 0", Found: after.String()})
		}
	}
	if sum != 0 {
		r.report(Difference{Check: CheckMovement, Position: at(pos), Environment: m.Environment,
			Field: "postings", Expected: "sum 0", Found: "sum " + sum.String()})
	}
	before := r.sums[m.Environment]
	r.sums[m.Environment] = before + sum
	if before == 0 && r.sums[m.Environment] != 0 {
		r.report(Difference{Check: CheckMovement, Position: at(pos), Environment: m.Environment,
			Field: "running sum", Expected: "0", Found: r.sums[m.Environment].String(),
			Detail: "sum over all of the merchant's accounts"})
	}
}

// applyRecord queues a record version for the page's fold
// (records.fold), which checks that a settled record never changes again.
func (r *replay) applyRecord(pos eventstore.Position, rec ledger.Record) {
	canon, err := json.Marshal(rec)
	if err != nil {
		r.report(Difference{Check: CheckEvent, Position: at(pos), RecordID: rec.ID, Detail: err.Error()})
		return
	}
	r.writes = append(r.writes, recordWrite{pos: pos, rec: rec, canon: canon})
}

// applyWallet folds a wallet stream event.
func (r *replay) applyWallet(customerID string, re eventstore.RecordedEvent) {
	mine := metaMerchant(re) == r.merchantID
	if mine {
		r.customers[customerID] = true
	}
	ev, err := app.WalletKind.Registry.Decode(re.Type, re.Data)
	if err != nil {
		if mine {
			r.report(Difference{Check: CheckEvent, Position: at(re.Position), CustomerID: customerID,
				Detail: "cannot decode " + re.Type + " of " + re.Stream + ": " + err.Error()})
		}
		return
	}
	r.wallets[customerID] = app.WalletKind.Apply(r.wallets[customerID], ev)
}

// checkWallets: every customer's wallet stream holds the balances the
// postings give (customer ids are unique across environments).
func (r *replay) checkWallets() {
	posted := map[string]wallet.State{}
	for k, v := range r.balances {
		if k.acct.Holder != ledger.HolderCustomer {
			continue
		}
		s := posted[k.acct.ID]
		switch k.acct.Bucket {
		case ledger.Main:
			s.Main += v
		case ledger.Escrow:
			s.Escrow += v
		}
		posted[k.acct.ID] = s
	}
	ids := make([]string, 0, len(r.customers))
	for id := range r.customers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		want, got := posted[id], r.wallets[id]
		for _, b := range []struct {
			name      string
			want, got money.Amount
		}{{"main", want.Main, got.Main}, {"escrow", want.Escrow, got.Escrow}} {
			if b.want != b.got {
				r.report(Difference{Check: CheckWallet, CustomerID: id, Field: b.name,
					Expected: b.want.String(), Found: b.got.String(), Detail: "postings vs wallet stream"})
			}
		}
	}
}

// fieldDiff is one differing top-level field of two records.
type fieldDiff struct{ name, want, got string }

// fieldDiffs compares two records' canonical JSON field by field.
func fieldDiffs(want, got []byte) []fieldDiff {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(want, &a)
	_ = json.Unmarshal(got, &b)
	names := map[string]bool{}
	for k := range a {
		names[k] = true
	}
	for k := range b {
		names[k] = true
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []fieldDiff
	for _, k := range sorted {
		if !bytes.Equal(a[k], b[k]) {
			out = append(out, fieldDiff{k, showJSON(a[k]), showJSON(b[k])})
		}
	}
	if len(out) == 0 && !bytes.Equal(want, got) {
		out = append(out, fieldDiff{"record", string(want), string(got)})
	}
	return out
}

// showJSON renders a JSON value for a report line: strings unquoted,
// absent as "missing".
func showJSON(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return `""`
		}
		return s
	}
	return string(raw)
}
