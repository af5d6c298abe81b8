package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/hold"
)

// NewFill folds the escrows of a rebuild (Filler). An escrow takes its
// position when its stream begins and its dispute position when its
// dispute opens, in the log's order, as escrowUpsertSQL gives them.
func (p Escrows) NewFill() Fill {
	return &escrowFill{held: hold.New[filledEscrow](fillHold), pos: positions{}, disputes: positions{}, sealer: p.Sealer}
}

type escrowFill struct {
	held          *hold.Rows[filledEscrow]
	pos, disputes positions
	sealer        domain.Sealer
}

// filledEscrow is an escrow folded so far; a position of 0 is none. kept
// is how many of its dispute entries are sealed already (Escrows.Plan).
type filledEscrow struct {
	state           escrow.State
	pos, disputePos int64
	kept            int
}

func (f *escrowFill) Take(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	// An escrow met again after it was written continues from its row.
	if again := f.held.Missing(continued(events, "escrow-")); len(again) > 0 {
		if err := f.readBack(ctx, tx, again); err != nil {
			return err
		}
	}
	for _, re := range events {
		id, ok := strings.CutPrefix(re.Stream, "escrow-")
		if !ok {
			continue
		}
		ev, err := escrow.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		r := f.held.Get(id)
		if r == nil {
			r = f.held.Add(id, filledEscrow{}, false)
		}
		next := escrow.Apply(r.V.state, ev)
		t := tenant{next.MerchantID, string(next.Environment)}
		if r.V.pos == 0 {
			r.V.pos = f.pos.next(t)
		}
		switch {
		case next.DisputedAt().IsZero():
			r.V.disputePos = 0
		case r.V.disputePos == 0:
			r.V.disputePos = f.disputes.next(t)
		}
		r.V.state = next
	}
	return f.write(ctx, tx, false)
}

// readBack holds again the escrows ids, read from their rows.
func (f *escrowFill) readBack(ctx context.Context, tx pgx.Tx, ids []string) error {
	rows, err := tx.Query(ctx, `SELECT id, state, pos, coalesce(dispute_pos, 0) FROM rm_escrows WHERE id = ANY ($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id  string
			doc []byte
			v   filledEscrow
		)
		if err := rows.Scan(&id, &doc, &v.pos, &v.disputePos); err != nil {
			return err
		}
		if err := domain.Unmarshal(doc, &v.state); err != nil {
			return err
		}
		v.kept = len(v.state.Disputes)
		f.held.Add(id, v, true)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if f.held.Get(id) == nil {
			return fmt.Errorf("projections: escrow %s continues in the log without its beginning", id)
		}
	}
	return nil
}

func (f *escrowFill) Finish(ctx context.Context, tx pgx.Tx) error {
	if err := f.write(ctx, tx, true); err != nil {
		return err
	}
	if err := finishSeq(ctx, tx, "rm_escrows", f.held); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, escrowsKept.countAllSQL())
	return err
}

// escrowFillColumns are the columns a fill writes of a new escrow.
var escrowFillColumns = []string{"id", "payment_token", "merchant_id", "environment", "seller_id", "buyer_id", "status",
	"category_id", "deleted", "state", "created_at", "disputed_at", "payment_id", "pos", "dispute_pos", "seq"}

// write writes the escrows due (hold.Rows.Due): new ones with COPY, those
// written before with the columns escrowUpsertSQL updates.
func (f *escrowFill) write(ctx context.Context, tx pgx.Tx, all bool) error {
	fresh, stored := f.held.Due(all)
	rows := make([][]any, 0, len(fresh))
	for _, rs := range [][]*hold.Row[filledEscrow]{fresh, stored} {
		for _, r := range rs {
			if err := f.seal(ctx, &r.V); err != nil {
				return err
			}
		}
	}
	for _, r := range fresh {
		row, err := escrowRow(r.V)
		if err != nil {
			return err
		}
		rows = append(rows, append(row, r.Seq()))
	}
	if err := copyRows(ctx, tx, "rm_escrows", escrowFillColumns, rows); err != nil {
		return err
	}
	if len(stored) == 0 {
		return nil
	}
	n := len(stored)
	var (
		ids, buyers, statuses, categories, payments = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		deleted                                     = make([]bool, n)
		docs                                        = make([][]byte, n)
		disputed                                    = make([]*time.Time, n)
		disputePos                                  = make([]*int64, n)
	)
	for i, r := range stored {
		row, err := escrowRow(r.V)
		if err != nil {
			return err
		}
		ids[i], buyers[i], statuses[i], categories[i] = row[0].(string), row[5].(string), row[6].(string), row[7].(string)
		deleted[i], docs[i], disputed[i], payments[i], disputePos[i] = row[8].(bool), row[9].([]byte), row[11].(*time.Time), row[12].(string), row[14].(*int64)
	}
	_, err := tx.Exec(ctx, `UPDATE rm_escrows o SET buyer_id = x.buyer, status = x.status, category_id = x.category,
		deleted = x.deleted, state = x.state, disputed_at = x.disputed, payment_id = x.payment, dispute_pos = x.dispute_pos
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::json[], $7::timestamptz[], $8::text[], $9::bigint[])
			AS x(id, buyer, status, category, deleted, state, disputed, payment, dispute_pos)
		WHERE o.id = x.id`, ids, buyers, statuses, categories, deleted, docs, disputed, payments, disputePos)
	return err
}

// seal seals the dispute entries of v not sealed yet.
func (f *escrowFill) seal(ctx context.Context, v *filledEscrow) error {
	s, err := sealDisputes(ctx, f.sealer, v.state, v.kept)
	if err != nil {
		return err
	}
	v.state, v.kept = s, len(s.Disputes)
	return nil
}

// escrowRow is an escrow's row, in escrowFillColumns but its seq.
func escrowRow(v filledEscrow) ([]any, error) {
	s := v.state
	doc, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var disputed *time.Time
	if at := s.DisputedAt(); !at.IsZero() {
		disputed = &at
	}
	var disputePos *int64
	if v.disputePos != 0 {
		disputePos = &v.disputePos
	}
	return []any{s.ID, s.PaymentToken, s.MerchantID, string(s.Environment), s.SellerID, s.BuyerID, string(s.Status),
		s.Terms.CategoryID, s.Deleted, doc, s.CreatedAt, disputed, s.PaymentID, v.pos, disputePos}, nil
}
