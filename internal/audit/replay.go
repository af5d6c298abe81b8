package audit

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
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

// recordState is what the replay knows of one transaction record.
type recordState struct {
	final    ledger.Record
	canon    []byte               // final, as canonical JSON
	settled  []byte               // the record when it first settled
	settleAt *eventstore.Position // where it first settled
	changed  bool                 // reported as changed after settling
}

// replay folds the log into what the merchant's read models and wallets
// must show, recording every invariant broken on the way.
type replay struct {
	merchantID string
	balances   map[balanceKey]money.Amount
	sums       map[domain.Environment]money.Amount
	records    map[string]*recordState
	order      []string                // record ids in first-seen order
	wallets    map[string]wallet.State // every wallet stream, by customer id
	customers  map[string]bool         // the merchant's customers
	diffs      []Difference

	events, entries, movements int64
}

func newReplay(merchantID string) *replay {
	return &replay{
		merchantID: merchantID,
		balances:   map[balanceKey]money.Amount{},
		sums:       map[domain.Environment]money.Amount{},
		records:    map[string]*recordState{},
		wallets:    map[string]wallet.State{},
		customers:  map[string]bool{},
	}
}

func (r *replay) report(d Difference) { r.diffs = append(r.diffs, d) }

func at(p eventstore.Position) *eventstore.Position { return &p }

// metaMerchant is the merchant an event's metadata names.
func metaMerchant(re eventstore.RecordedEvent) string {
	var m domain.Meta
	if len(re.Metadata) == 0 || json.Unmarshal(re.Metadata, &m) != nil {
		return ""
	}
	return m.MerchantID
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

// applyRecord folds a record (a reader upserts whole records by id) and
// checks that a settled record never changes again.
func (r *replay) applyRecord(pos eventstore.Position, rec ledger.Record) {
	canon, err := json.Marshal(rec)
	if err != nil {
		r.report(Difference{Check: CheckEvent, Position: at(pos), RecordID: rec.ID, Detail: err.Error()})
		return
	}
	st := r.records[rec.ID]
	if st == nil {
		st = &recordState{}
		r.records[rec.ID] = st
		r.order = append(r.order, rec.ID)
	}
	if st.settleAt != nil && !st.changed && !bytes.Equal(canon, st.settled) {
		st.changed = true
		for _, f := range fieldDiffs(st.settled, canon) {
			r.report(Difference{Check: CheckSettledOnce, Position: at(pos), RecordID: rec.ID, Field: f.name,
				Expected: f.want, Found: f.got, Detail: "settled at " + st.settleAt.String()})
		}
	}
	st.final, st.canon = rec, canon
	if st.settleAt == nil && rec.Status.Settled() {
		st.settled, st.settleAt = canon, at(pos)
	}
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

// finish runs the checks that need the whole replay.
func (r *replay) finish() {
	r.checkCommission()
	r.checkWallets()
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

// checkCommission: commission is charged at most once per escrow.
func (r *replay) checkCommission() {
	type escrowKey struct {
		env domain.Environment
		id  string
	}
	charged := map[escrowKey][]string{}
	var keys []escrowKey
	for _, id := range r.order {
		rec := r.records[id].final
		// A failed or reversed commission charged nothing.
		if rec.Type != ledger.Commission || rec.EscrowDetails == nil || rec.Status == ledger.Failed || rec.Status == ledger.Reversed {
			continue
		}
		seen := map[string]bool{}
		for _, eid := range rec.EscrowDetails.EscrowIDs {
			if seen[eid] {
				continue
			}
			seen[eid] = true
			k := escrowKey{rec.Environment, eid}
			if charged[k] == nil {
				keys = append(keys, k)
			}
			charged[k] = append(charged[k], id)
		}
	}
	for _, k := range keys {
		if ids := charged[k]; len(ids) > 1 {
			r.report(Difference{Check: CheckCommission, Environment: k.env, EscrowID: k.id,
				Expected: "1 commission record", Found: strconv.Itoa(len(ids)) + " (" + strings.Join(ids, ", ") + ")"})
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
