package projections

import (
	"context"

	"github.com/escrowd/escrowd/view"

	"github.com/escrowd/escrowd/domain"
)

// categoriesKept counts the category listing (key categories: the live
// categories of the tenant).
var categoriesKept = keptTable{table: "rm_categories", counts: "rm_category_counts", id: "category_id",
	orders: []keyedOrder{{keys: "listing_keys", pos: "pos"}}}

func categoryListingDDL() string {
	return `
ALTER TABLE rm_categories ADD COLUMN IF NOT EXISTS pos bigint;
ALTER TABLE rm_categories ADD COLUMN IF NOT EXISTS listing_keys text[] GENERATED ALWAYS AS (
    CASE WHEN deleted_at IS NULL THEN ARRAY['categories'] ELSE '{}'::text[] END) STORED;` +
		countsDDL(categoriesKept.counts) + categoriesKept.backfillDDL([]backfill{{pos: "pos", where: "true", order: "seq"}}) + `
CREATE UNIQUE INDEX IF NOT EXISTS rm_categories_pos ON rm_categories (merchant_id, environment, pos);`
}

// categoryPosSQL is the position a new category of ($2, $3) takes.
var categoryPosSQL = categoriesKept.nextPosSQL("$2", "$3")

// ListCategories pages a merchant's live categories of env in position
// order (categoryRank), or with p.After those after that category.
//
// The count is kept; the page is ranked over the tenant's live categories,
// which are the merchant's own short list of kinds of goods (the order a
// merchant sets numbers them all: category.OrderSet), not a history that
// grows with traffic.
func (q *Queries) ListCategories(ctx context.Context, merchantID string, env domain.Environment, p view.Page) ([]view.Category, view.Pagination, error) {
	count, _, err := q.total(ctx, listing{kept: categoriesKept, merchant: merchantID, environment: env, keys: []string{"categories"}})
	if err != nil {
		return nil, view.Pagination{}, err
	}
	from := int64(p.Page-1) * int64(p.Limit) // rows before the page
	if p.After != "" {
		c, ok, err := q.CategoryByID(ctx, p.After)
		if err != nil {
			return nil, view.Pagination{}, err
		}
		if !ok || c.MerchantID != merchantID || c.Environment != string(env) {
			return nil, view.Pagination{}, ErrUnknownCursor
		}
		from = int64(c.Position)
	}
	rows, err := q.pool.Query(ctx, `SELECT `+categoryColumns+` FROM (
		SELECT *, `+categoryRank+` AS rank FROM rm_categories
		WHERE merchant_id = $1 AND environment = $2 AND deleted_at IS NULL) ranked
		WHERE rank > $3 ORDER BY rank LIMIT $4`, merchantID, string(env), from, p.Limit+1)
	if err != nil {
		return nil, view.Pagination{}, err
	}
	defer rows.Close()
	out := []view.Category{}
	var next *string
	for rows.Next() {
		c, err := scanCategory(rows)
		if err != nil {
			return nil, view.Pagination{}, err
		}
		if len(out) == p.Limit {
			id := out[len(out)-1].ID
			next = &id
			break
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, view.Pagination{}, err
	}
	return out, view.PageOf(p, count, next), nil
}
