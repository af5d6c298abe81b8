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

func (Categories) StreamPrefixes() []string { return []string{"category-"} }
func (Categories) Name() string             { return "categories" }
func (Categories) Tables() []string         { return []string{"rm_categories"} }
func (Categories) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS rm_categories (
    category_id  text PRIMARY KEY,
    merchant_id  text NOT NULL,
    environment  text NOT NULL,
    name         text NOT NULL,
    description  text NOT NULL DEFAULT '',
    seq          bigserial,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    deleted_at   timestamptz
);
CREATE INDEX IF NOT EXISTS rm_categories_list
    ON rm_categories (merchant_id, environment, created_at DESC, seq DESC) WHERE deleted_at IS NULL;`
}

func (Categories) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.RecordedEvent) error {
	for _, re := range events {
		if !strings.HasPrefix(re.Stream, "category-") {
			continue
		}
		ev, err := category.Registry.Decode(re.Type, re.Data)
		if err != nil {
			return err
		}
		id := strings.TrimPrefix(re.Stream, "category-")
		switch e := ev.(type) {
		case category.Created:
			_, err = tx.Exec(ctx, `INSERT INTO rm_categories (category_id, merchant_id, environment, name, description,
				created_at, updated_at) VALUES ($1,$2,$3,$4,$5,$6,$6) ON CONFLICT (category_id) DO NOTHING`,
				id, e.MerchantID, string(e.Environment), e.Name, e.Description, e.CreatedAt)
		case category.Updated:
			_, err = tx.Exec(ctx, `UPDATE rm_categories SET name = coalesce($2, name), description = coalesce($3, description),
				updated_at = $4 WHERE category_id = $1 AND deleted_at IS NULL`, id, e.Name, e.Description, e.UpdatedAt)
		case category.Deleted:
			_, err = tx.Exec(ctx, `UPDATE rm_categories SET deleted_at = $2, updated_at = $2
				WHERE category_id = $1 AND deleted_at IS NULL`, id, e.DeletedAt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
