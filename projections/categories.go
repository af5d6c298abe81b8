package projections

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/eventstore"
)

// Categories builds the table of merchants' escrow categories. A deletion
// marks the row, so a replayed create never brings it back.
type Categories struct{}

func (Categories) StreamPrefixes() []string { return []string{"category-", "categoryorder-"} }
func (Categories) Name() string             { return CategoriesName }
func (Categories) Tables() []string {
	return []string{"rm_categories", "rm_category_orders", categoriesKept.counts}
}
func (Categories) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_categories (
    category_id  text PRIMARY KEY,
    merchant_id  text NOT NULL,
    environment  text NOT NULL,
    name         text NOT NULL,
    description  text NOT NULL DEFAULT '',
    image_url    text NOT NULL DEFAULT '',
    position     int,
    seq          bigserial,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    deleted_at   timestamptz
);
-- Tables made before categories had images and positions (api-decisions
-- §7) get the columns; their rows keep no position (see category.Order).
ALTER TABLE rm_categories ADD COLUMN IF NOT EXISTS image_url text NOT NULL DEFAULT '';
ALTER TABLE rm_categories ADD COLUMN IF NOT EXISTS position int;
CREATE INDEX IF NOT EXISTS rm_categories_list
    ON rm_categories (merchant_id, environment, created_at DESC, seq DESC) WHERE deleted_at IS NULL;
-- The last order of each tenant: a create and the order that places it are
-- one append, whose events the log gives in stream-name order (the
-- category's first today); a category created after its order (another
-- naming, or an older log of the KurrentDB adapter, which kept the order
-- the command touched the streams in) takes its position from here.
CREATE TABLE IF NOT EXISTS rm_category_orders (
    merchant_id text NOT NULL,
    environment text NOT NULL,
    ids         text[] NOT NULL,
    PRIMARY KEY (merchant_id, environment)
);` + categoryListingDDL()
}

func (Categories) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	for _, re := range events {
		if strings.HasPrefix(re.Stream, "categoryorder-") {
			if err := applyCategoryOrder(ctx, tx, re); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(re.Stream, "category-") {
			continue
		}
		ev, err := category.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		id := strings.TrimPrefix(re.Stream, "category-")
		switch e := ev.(type) {
		case category.Created: // in the listing from now (keptTable.execChange)
			err = categoriesKept.execChange(ctx, tx, id, func() error {
				_, err := tx.Exec(ctx, `INSERT INTO rm_categories (category_id, merchant_id, environment, name, description,
					image_url, created_at, updated_at, pos, position) VALUES ($1,$2,$3,$4,$5,$6,$7,$7,`+categoryPosSQL+`,
					(SELECT array_position(ids, $1) FROM rm_category_orders WHERE merchant_id = $2 AND environment = $3))
					ON CONFLICT (category_id) DO NOTHING`,
					id, e.MerchantID, string(e.Environment), e.Name, e.Description, e.ImageURL, e.CreatedAt)
				return err
			})
		case category.Updated:
			_, err = tx.Exec(ctx, `UPDATE rm_categories SET name = coalesce($2, name), description = coalesce($3, description),
				image_url = coalesce($5, image_url), updated_at = $4 WHERE category_id = $1 AND deleted_at IS NULL`,
				id, e.Name, e.Description, e.UpdatedAt, e.ImageURL)
		case category.Deleted: // out of the listing
			err = categoriesKept.execChange(ctx, tx, id, func() error {
				_, err := tx.Exec(ctx, `UPDATE rm_categories SET deleted_at = $2, updated_at = $2
					WHERE category_id = $1 AND deleted_at IS NULL`, id, e.DeletedAt)
				return err
			})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyCategoryOrder numbers a merchant environment's categories as the
// order lists them; one it no longer lists has no position. The order is
// kept (rm_category_orders) for a category whose creation comes after it
// in the log.
func applyCategoryOrder(ctx context.Context, tx pgx.Tx, re eventstore.RecordedEvent) error {
	ev, err := category.OrderRegistry.Decode(re.Type, re.Data)
	if err != nil {
		return err
	}
	o, ok := ev.(category.OrderSet)
	if !ok {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO rm_category_orders (merchant_id, environment, ids) VALUES ($1, $2, $3)
		ON CONFLICT (merchant_id, environment) DO UPDATE SET ids = excluded.ids`, o.MerchantID, string(o.Environment), o.IDs); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE rm_categories SET position = NULL WHERE merchant_id = $1 AND environment = $2
		AND position IS NOT NULL AND NOT (category_id = ANY ($3))`, o.MerchantID, string(o.Environment), o.IDs); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE rm_categories c SET position = o.ord
		FROM unnest($1::text[]) WITH ORDINALITY AS o(id, ord) WHERE c.category_id = o.id AND c.position IS DISTINCT FROM o.ord`, o.IDs)
	return err
}
