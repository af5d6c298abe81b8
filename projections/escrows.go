package projections

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/projector"
)

// Escrows keeps every escrow's folded state (the domain's own Apply, so the
// read model cannot disagree with the aggregate) with the columns listings
// filter on. It remembers the states it wrote last (see escrowStates), so
// following an escrow's events needs no read of its row.
//
// With a Sealer, the dispute entries' names and messages are kept sealed
// (see sealed_escrows.go); the states it remembers are the kept ones.
type Escrows struct {
	states *escrowStates
	Sealer domain.Sealer
}

// NewEscrows returns the escrows projector, keeping dispute entries plain
// (see Sealer).
func NewEscrows() Escrows { return Escrows{states: newEscrowStates()} }

func newEscrowStates() *escrowStates { return &escrowStates{m: map[string]cachedEscrow{}} }

// escrowStates maps an escrow id to its state after a known stream
// revision. An entry is only used to apply the event with the next
// revision; anything else (a batch applied again after its transaction
// rolled back, a restart, another process having applied events meanwhile)
// misses and reads the row, so the cache can be stale but never wrong. That
// rests on an entry only ever being computed over a row at the state before
// the batch: the runner remembers a batch's states only once it committed
// with the checkpoint moved from where the batch starts (Planner), and Apply
// in a transaction runs after the move (an entry computed over a row
// already past the batch would be wrong, rolled back or not).
// Sharing a cached state is safe because escrow.Apply never changes its
// input (it copies the slices it extends).
type escrowStates struct {
	mu sync.Mutex
	m  map[string]cachedEscrow
}

type cachedEscrow struct {
	rev   uint64
	state escrow.State
}

// escrowCacheSize bounds the cache; when full an arbitrary entry goes (most
// entries are of escrows that reached a final status).
const escrowCacheSize = 8192

func (c *escrowStates) get(id string, rev uint64) (escrow.State, bool) {
	if c == nil {
		return escrow.State{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || e.rev != rev {
		return escrow.State{}, false
	}
	return e.state, true
}

func (c *escrowStates) put(id string, rev uint64, s escrow.State) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; !ok && len(c.m) >= escrowCacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[id] = cachedEscrow{rev: rev, state: s}
}

func (Escrows) StreamPrefixes() []string { return []string{"escrow-"} }
func (Escrows) Name() string             { return EscrowsName }
func (Escrows) Tables() []string         { return []string{"rm_escrows", escrowsKept.counts} }
func (Escrows) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_escrows (
    id            text PRIMARY KEY,
    payment_token text NOT NULL UNIQUE,
    merchant_id   text NOT NULL,
    environment   text NOT NULL,
    seller_id     text NOT NULL,
    buyer_id      text NOT NULL DEFAULT '',
    status        text NOT NULL,
    category_id   text NOT NULL DEFAULT '',
    deleted       boolean NOT NULL DEFAULT false,
    state         json NOT NULL,
    created_at    timestamptz NOT NULL,
    seq           bigserial
);
-- Date ranges (listings' from and to): rows are written in time order,
-- so a block range index finds them at a fraction of a btree's upkeep
-- (docs/listings.md, "Date ranges").
CREATE INDEX IF NOT EXISTS rm_escrows_created ON rm_escrows USING brin (created_at timestamptz_minmax_multi_ops) WITH (pages_per_range = 32, autosummarize = on);
ALTER TABLE rm_escrows ADD COLUMN IF NOT EXISTS disputed_at timestamptz;
ALTER TABLE rm_escrows ADD COLUMN IF NOT EXISTS payment_id text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS rm_escrows_disputes ON rm_escrows (merchant_id, environment, disputed_at DESC, seq DESC)
    WHERE disputed_at IS NOT NULL;` + escrowListingDDL()
}

func (p Escrows) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	return projector.ApplyPlan(ctx, p, tx, events)
}

// escrowStatesSQL reads the states of the escrows whose ids are $1.
var escrowStatesSQL = byIDs("rm_escrows", "id", "id, state", `$1`)

// Plan folds consecutive events of one escrow in memory and writes once:
// one read for the states neither the batch nor the cache has, one upsert.
// The states are remembered only once the upsert has committed (see
// Planner: the read may have seen rows past the batch).
func (p Escrows) Plan(ctx context.Context, r Querier, events []eventstore.RecordedEvent, b *pgx.Batch) (func(), error) {
	type folded struct {
		state escrow.State
		rev   uint64
		// kept is how many dispute entries of state are sealed already:
		// all of those it started from.
		kept int
	}
	pending := map[string]folded{}
	var order []string
	var missing []string
	for _, re := range events {
		id, ok := strings.CutPrefix(re.Stream, "escrow-")
		if !ok {
			continue
		}
		if _, seen := pending[id]; seen {
			continue
		}
		order = append(order, id)
		f := folded{rev: re.Revision}
		if re.Revision > 0 { // not the stream's first event: start from its state
			if s, ok := p.states.get(id, re.Revision-1); ok {
				f.state, f.kept = s, len(s.Disputes)
			} else {
				missing = append(missing, id)
			}
		}
		pending[id] = f
	}
	if len(order) == 0 {
		return nil, nil
	}
	if len(missing) > 0 {
		rows, err := r.Query(ctx, escrowStatesSQL, missing)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				id  string
				doc []byte
				s   escrow.State
			)
			if err := rows.Scan(&id, &doc); err != nil {
				rows.Close()
				return nil, err
			}
			if err := domain.Unmarshal(doc, &s); err != nil {
				rows.Close()
				return nil, err
			}
			f := pending[id]
			f.state, f.kept = s, len(s.Disputes)
			pending[id] = f
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	// opened: where in the batch each escrow's dispute opened, so dispute
	// positions follow the log's order of openings, not the order the
	// batch first met the escrows (a rebuild's batches are larger).
	opened := map[string]int64{}
	for i, re := range events {
		id, ok := strings.CutPrefix(re.Stream, "escrow-")
		if !ok {
			continue
		}
		ev, err := escrow.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return nil, err
		}
		f := pending[id]
		next := escrow.Apply(f.state, ev)
		if f.state.DisputedAt().IsZero() && !next.DisputedAt().IsZero() {
			opened[id] = int64(i)
		}
		pending[id] = folded{state: next, rev: re.Revision, kept: f.kept}
	}
	n := len(order)
	var (
		ids, tokens, merchants, envs, sellers, buyers, statuses, categories = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		deleted  = make([]bool, n)
		docs     = make([]string, n)
		created  = make([]time.Time, n)
		disputed = make([]*time.Time, n)
		payments = make([]string, n)
		openings = make([]int64, n)
	)
	for i, id := range order {
		f := pending[id]
		s, err := sealDisputes(ctx, p.Sealer, f.state, f.kept)
		if err != nil {
			return nil, err
		}
		f.state, f.kept = s, len(s.Disputes)
		pending[id] = f
		doc, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		ids[i], tokens[i], merchants[i], envs[i], sellers[i], buyers[i] = s.ID, s.PaymentToken, s.MerchantID, string(s.Environment), s.SellerID, s.BuyerID
		statuses[i], categories[i], deleted[i], docs[i], created[i] = string(s.Status), s.Terms.CategoryID, s.Deleted, string(doc), s.CreatedAt
		if at := s.DisputedAt(); !at.IsZero() {
			disputed[i] = &at
		}
		payments[i] = s.PaymentID
		openings[i] = int64(len(events)) + int64(i) // opened before this batch
		if at, ok := opened[id]; ok {
			openings[i] = at
		}
	}
	// The listings' counts move with the upsert (keptTable.changeSQL).
	b.Queue(escrowChangeSQL, ids, tokens, merchants, envs, sellers, buyers, statuses, categories, deleted, docs, created, disputed, payments,
		openings)
	return func() {
		for _, id := range order {
			p.states.put(id, pending[id].rev, pending[id].state)
		}
	}, nil
}

// EscrowIDByToken resolves a payment token (deleted escrows included; the
// aggregate decides what a deleted escrow allows).
func (q *Queries) EscrowIDByToken(ctx context.Context, token string) (string, bool, error) {
	var id string
	err := q.pool.QueryRow(ctx, `SELECT id FROM rm_escrows WHERE payment_token = $1`, token).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return id, err == nil, err
}

// EscrowByID reads an escrow (any merchant's; deleted ones included) by id.
func (q *Queries) EscrowByID(ctx context.Context, id string) (escrow.State, bool, error) {
	return q.escrowWhere(ctx, `id`, id)
}

// EscrowByToken reads an escrow (any merchant's; deleted ones included) by
// payment token.
func (q *Queries) EscrowByToken(ctx context.Context, token string) (escrow.State, bool, error) {
	return q.escrowWhere(ctx, `payment_token`, token)
}

// escrowWhere reads the escrow whose unique column col is v.
func (q *Queries) escrowWhere(ctx context.Context, col, v string) (escrow.State, bool, error) {
	var doc []byte
	var s escrow.State
	err := q.pool.QueryRow(ctx, `SELECT state FROM rm_escrows WHERE `+col+` = $1`, v).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	if err := domain.Unmarshal(doc, &s); err != nil {
		return s, true, err
	}
	return s, true, q.openDisputes(ctx, &s)
}

// EscrowFilter selects escrows of a merchant and environment.
type EscrowFilter struct {
	MerchantID   string
	Environment  domain.Environment
	SellerID     *string // "" = the merchant's own sales
	BuyerID      *string
	PartyID      string // seller or buyer
	Status       string
	CategoryID   string
	PaymentToken string
	From, To     *time.Time
}

// DisputeFilter selects the escrows of a merchant and environment that
// ever had a dispute (resolved ones included).
type DisputeFilter struct {
	MerchantID   string
	Environment  domain.Environment
	PartyID      string // a customer: escrows it buys or sells
	PaymentID    string
	PaymentToken string
	Status       string
	From, To     *time.Time // when the dispute was opened
}
