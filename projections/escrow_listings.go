package projections

import (
	"context"
	"time"

	"github.com/escrowd/escrowd/view"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
)

// escrowsKept counts the escrow listings (docs/listings.md): the feeds and
// the sales and purchases of a party in escrow creation order (pos), the
// disputes in the order they were opened (dispute_pos).
var escrowsKept = keptTable{table: "rm_escrows", counts: "rm_escrow_counts", id: "id",
	orders: []keyedOrder{{keys: "listing_keys", pos: "pos"}, {keys: "dispute_keys", pos: "dispute_pos"}}}

// escrowListingDDL adds the listing columns, counts and indexes to
// rm_escrows. The keys (one per listing and kept filter value an escrow is
// in) are generated from the row, so a row's keys are what its columns say:
//
//	feeds, feeds|s=<status>, feeds|c=<category>, feeds|s=<status>|c=<category>
//	sales|p=<seller>, sales|p=<seller>|s=<status>   (seller '' = the merchant)
//	buy|p=<buyer>, buy|p=<buyer>|s=<status>         (when bought)
//	disputes, disputes|s=<status>, disputes|p=<seller or buyer>
//
// A deleted escrow leaves the feeds and sales (not the disputes, as before).
func escrowListingDDL() string {
	return `
ALTER TABLE rm_escrows ADD COLUMN IF NOT EXISTS pos bigint;
ALTER TABLE rm_escrows ADD COLUMN IF NOT EXISTS dispute_pos bigint;
ALTER TABLE rm_escrows ADD COLUMN IF NOT EXISTS listing_keys text[] GENERATED ALWAYS AS (
    CASE WHEN deleted THEN '{}'::text[] ELSE
        ARRAY['feeds', 'feeds|s=' || status, 'feeds|c=' || category_id, 'feeds|s=' || status || '|c=' || category_id,
              'sales|p=' || seller_id, 'sales|p=' || seller_id || '|s=' || status]
        || CASE WHEN buyer_id = '' THEN '{}'::text[] ELSE ARRAY['buy|p=' || buyer_id, 'buy|p=' || buyer_id || '|s=' || status] END
    END) STORED;
ALTER TABLE rm_escrows ADD COLUMN IF NOT EXISTS dispute_keys text[] GENERATED ALWAYS AS (
    CASE WHEN disputed_at IS NULL THEN '{}'::text[] ELSE
        ARRAY['disputes', 'disputes|s=' || status]
        || CASE WHEN seller_id = '' THEN '{}'::text[] ELSE ARRAY['disputes|p=' || seller_id] END
        || CASE WHEN buyer_id = '' THEN '{}'::text[] ELSE ARRAY['disputes|p=' || buyer_id] END
    END) STORED;` + countsDDL(escrowsKept.counts) + escrowsKept.backfillDDL([]backfill{
		{pos: "pos", where: "true", order: "seq"},
		{pos: "dispute_pos", where: "disputed_at IS NOT NULL", order: "disputed_at, seq"},
	}) + `
CREATE UNIQUE INDEX IF NOT EXISTS rm_escrows_pos ON rm_escrows (merchant_id, environment, pos);
CREATE UNIQUE INDEX IF NOT EXISTS rm_escrows_dispute_pos ON rm_escrows (merchant_id, environment, dispute_pos)
    WHERE dispute_pos IS NOT NULL;
CREATE INDEX IF NOT EXISTS rm_escrows_status_pos ON rm_escrows (merchant_id, environment, status, pos) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS rm_escrows_category_pos ON rm_escrows (merchant_id, environment, category_id, pos) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS rm_escrows_seller_pos ON rm_escrows (merchant_id, environment, seller_id, pos) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS rm_escrows_buyer_pos ON rm_escrows (merchant_id, environment, buyer_id, pos) WHERE NOT deleted;
CREATE INDEX IF NOT EXISTS rm_escrows_dispute_status ON rm_escrows (merchant_id, environment, status, dispute_pos)
    WHERE dispute_pos IS NOT NULL;
CREATE INDEX IF NOT EXISTS rm_escrows_dispute_seller ON rm_escrows (merchant_id, environment, seller_id, dispute_pos)
    WHERE dispute_pos IS NOT NULL;
CREATE INDEX IF NOT EXISTS rm_escrows_dispute_buyer ON rm_escrows (merchant_id, environment, buyer_id, dispute_pos)
    WHERE dispute_pos IS NOT NULL;`
}

// escrowUpsertSQL writes a batch's escrows. A new escrow takes the next
// positions of its tenant (after the highest, in the batch's order), an
// escrow whose dispute opens in the batch the next dispute position (in
// the order the disputes opened, $14); both then never change.
const escrowUpsertSQL = `INSERT INTO rm_escrows (id, payment_token, merchant_id, environment, seller_id, buyer_id, status,
		category_id, deleted, state, created_at, disputed_at, payment_id, pos, dispute_pos)
	SELECT x.id, x.token, x.merchant, x.env, x.seller, x.buyer, x.status, x.category, x.deleted, x.state, x.created, x.disputed, x.payment,
		CASE WHEN o.id IS NULL
			THEN (SELECT coalesce(max(pos), 0) FROM rm_escrows WHERE merchant_id = x.merchant AND environment = x.env)
				+ row_number() OVER (PARTITION BY x.merchant, x.env, o.id IS NULL ORDER BY x.ord)
			ELSE o.pos END,
		CASE WHEN x.disputed IS NULL THEN NULL
			WHEN o.dispute_pos IS NOT NULL THEN o.dispute_pos
			ELSE (SELECT coalesce(max(dispute_pos), 0) FROM rm_escrows WHERE merchant_id = x.merchant AND environment = x.env)
				+ row_number() OVER (PARTITION BY x.merchant, x.env, x.disputed IS NOT NULL AND o.dispute_pos IS NULL ORDER BY x.opened)
			END
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
		$9::bool[], $10::json[], $11::timestamptz[], $12::timestamptz[], $13::text[], $14::bigint[])
		WITH ORDINALITY AS x(id, token, merchant, env, seller, buyer, status, category, deleted, state, created, disputed, payment, opened, ord)
	LEFT JOIN LATERAL (SELECT o.id, o.pos, o.dispute_pos FROM rm_escrows o WHERE o.id = x.id LIMIT 1) o ON true -- see byIDs
	ORDER BY x.ord
	ON CONFLICT (id) DO UPDATE SET buyer_id = excluded.buyer_id, status = excluded.status, category_id = excluded.category_id,
	deleted = excluded.deleted, state = excluded.state, disputed_at = excluded.disputed_at, payment_id = excluded.payment_id,
	dispute_pos = excluded.dispute_pos`

// escrowChangeSQL is escrowUpsertSQL moving the listings' counts with it.
var escrowChangeSQL = escrowsKept.changeSQL(escrowUpsertSQL)

// escrowListing starts a listing of a merchant's escrows by pos.
func escrowListing(merchantID string, env domain.Environment, pos string) listing {
	return listing{kept: escrowsKept, pos: pos, merchant: merchantID, environment: env, columns: "state"}
}

// Escrows pages escrows newest first (in creation order).
func (q *Queries) Escrows(ctx context.Context, f EscrowFilter, p view.Page) ([]escrow.State, view.Pagination, error) {
	return q.pageEscrowStates(ctx, escrowsListing(f), p)
}

// escrowsListing is the listing f selects.
func escrowsListing(f EscrowFilter) listing {
	l := escrowListing(f.MerchantID, f.Environment, "pos")
	var prefixes []string
	switch {
	case f.SellerID != nil && f.BuyerID == nil && f.PartyID == "":
		l.branches = []string{`NOT deleted AND seller_id = ` + l.arg(*f.SellerID)}
		prefixes = []string{"sales|p=" + *f.SellerID}
	case f.BuyerID != nil && f.SellerID == nil && f.PartyID == "" && *f.BuyerID != "":
		l.branches = []string{`NOT deleted AND buyer_id = ` + l.arg(*f.BuyerID)}
		prefixes = []string{"buy|p=" + *f.BuyerID}
	case f.SellerID == nil && f.BuyerID == nil && f.PartyID != "":
		a := l.arg(f.PartyID)
		l.branches = []string{`NOT deleted AND seller_id = ` + a, `NOT deleted AND buyer_id = ` + a}
		prefixes = []string{"sales|p=" + f.PartyID, "buy|p=" + f.PartyID}
	case f.SellerID == nil && f.BuyerID == nil:
		l.branches = []string{`NOT deleted`}
		prefixes = []string{"feeds"}
	default: // not a listing the API has: one condition, counted
		l.branches = []string{`NOT deleted`}
		if f.SellerID != nil {
			l.and(`seller_id = ` + l.arg(*f.SellerID))
		}
		if f.BuyerID != nil {
			l.and(`buyer_id = ` + l.arg(*f.BuyerID))
		}
		if f.PartyID != "" {
			a := l.arg(f.PartyID)
			l.and(`(seller_id = ` + a + ` OR buyer_id = ` + a + `)`)
		}
	}
	if f.Status != "" {
		l.and(`status = ` + l.arg(f.Status))
		prefixes = withKey(prefixes, "|s="+f.Status)
	}
	if f.CategoryID != "" {
		l.and(`category_id = ` + l.arg(f.CategoryID))
		if len(prefixes) == 1 && (prefixes[0] == "feeds" || prefixes[0] == "feeds|s="+f.Status) {
			prefixes = withKey(prefixes, "|c="+f.CategoryID)
		} else {
			prefixes = nil
		}
	}
	if f.PaymentToken != "" {
		l.and(`payment_token = ` + l.arg(f.PaymentToken))
		prefixes = nil
	}
	l.keys = withDates(&l, "created_at", f.From, f.To, prefixes)
	return l
}

// withKey appends suffix to every key (none stay none).
func withKey(keys []string, suffix string) []string {
	for i := range keys {
		keys[i] += suffix
	}
	return keys
}

// withDates adds a date range on col to l and returns keys, or nil when
// there is a range: no key counts one.
func withDates(l *listing, col string, from, to *time.Time, keys []string) []string {
	if from != nil {
		l.and(col + ` >= ` + l.arg(*from))
		keys = nil
	}
	if to != nil {
		l.and(col + ` < ` + l.arg(*to))
		keys = nil
	}
	return keys
}

// Disputes pages disputed escrows, newest dispute first.
func (q *Queries) Disputes(ctx context.Context, f DisputeFilter, p view.Page) ([]escrow.State, view.Pagination, error) {
	return q.pageEscrowStates(ctx, disputesListing(f), p)
}

// disputesListing is the listing f selects.
func disputesListing(f DisputeFilter) listing {
	l := escrowListing(f.MerchantID, f.Environment, "dispute_pos")
	keys := []string{"disputes"}
	if f.PartyID != "" {
		a := l.arg(f.PartyID)
		l.branches = []string{`dispute_pos IS NOT NULL AND seller_id = ` + a, `dispute_pos IS NOT NULL AND buyer_id = ` + a}
		keys = []string{"disputes|p=" + f.PartyID}
	} else {
		l.branches = []string{`dispute_pos IS NOT NULL`}
	}
	if f.Status != "" {
		l.and(`status = ` + l.arg(f.Status))
		if f.PartyID != "" {
			keys = nil
		} else {
			keys = []string{"disputes|s=" + f.Status}
		}
	}
	if f.PaymentID != "" {
		l.and(`payment_id = ` + l.arg(f.PaymentID))
		keys = nil
	}
	if f.PaymentToken != "" {
		l.and(`payment_token = ` + l.arg(f.PaymentToken))
		keys = nil
	}
	l.keys = withDates(&l, "disputed_at", f.From, f.To, keys)
	return l
}

// pageEscrowStates reads a page of escrows.
func (q *Queries) pageEscrowStates(ctx context.Context, l listing, p view.Page) ([]escrow.State, view.Pagination, error) {
	out := []escrow.State{}
	pg, err := q.page(ctx, l, p, func(rows pgx.Rows, tail ...any) error {
		var doc []byte
		if err := rows.Scan(append([]any{&doc}, tail...)...); err != nil {
			return err
		}
		var s escrow.State
		if err := domain.Unmarshal(doc, &s); err != nil {
			return err
		}
		if err := q.openDisputes(ctx, &s); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, pg, err
}
