package projections

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/view"
)

// CategoryByID returns a live (not deleted) category of any merchant: the
// caller decides ownership from MerchantID and Environment.
func (q *Queries) CategoryByID(ctx context.Context, id string) (view.Category, bool, error) {
	c, err := scanCategory(q.pool.QueryRow(ctx, `SELECT `+categoryColumns+` FROM (
		SELECT *, `+categoryRank+` AS rank FROM rm_categories
		WHERE (merchant_id, environment) = (SELECT merchant_id, environment FROM rm_categories WHERE category_id = $1)
		  AND deleted_at IS NULL) ranked WHERE category_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	return c, err == nil, err
}

// EscrowCategory is the category an escrow shows (webhook payloads): nil
// when there is none, or when the categories read model is not created yet
// (a subscriber may run ahead of the projector role on a fresh database);
// the payload then carries no category rather than waiting for it.
func (q *Queries) EscrowCategory(ctx context.Context, id string) (*view.Category, error) {
	c, ok, err := q.CategoryByID(ctx, id)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return nil, nil
	}
	if err != nil || !ok {
		return nil, err
	}
	return &c, nil
}

// ListCategories pages a merchant's live categories of env in position
// order (categoryRank).
func (q *Queries) ListCategories(ctx context.Context, merchantID string, env domain.Environment, p view.Page) ([]view.Category, view.Pagination, error) {
	var count int64
	if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM rm_categories
		WHERE merchant_id = $1 AND environment = $2 AND deleted_at IS NULL`, merchantID, string(env)).Scan(&count); err != nil {
		return nil, view.Pagination{}, err
	}
	rows, err := q.pool.Query(ctx, `SELECT `+categoryColumns+` FROM (
		SELECT *, `+categoryRank+` AS rank FROM rm_categories
		WHERE merchant_id = $1 AND environment = $2 AND deleted_at IS NULL) ranked
		ORDER BY rank LIMIT $3 OFFSET $4`, merchantID, string(env), p.Limit, (p.Page-1)*p.Limit)
	if err != nil {
		return nil, view.Pagination{}, err
	}
	defer rows.Close()
	out := []view.Category{}
	for rows.Next() {
		c, err := scanCategory(rows)
		if err != nil {
			return nil, view.Pagination{}, err
		}
		out = append(out, c)
	}
	return out, view.NewPagination(p, count), rows.Err()
}

// categoryRank numbers a merchant environment's live categories 1..n: the
// ordered ones by their position, then those created before categories had
// positions, newest first (as listings were).
const categoryRank = `row_number() OVER (ORDER BY position IS NULL, position, created_at DESC, seq DESC)`

const categoryColumns = `category_id, name, description, image_url, rank, merchant_id, environment, created_at, updated_at`

func scanCategory(row pgx.Row) (view.Category, error) {
	var c view.Category
	var rank int64
	err := row.Scan(&c.ID, &c.Name, &c.Description, &c.ImageURL, &rank, &c.MerchantID, &c.Environment, &c.CreatedAt, &c.UpdatedAt)
	c.Position = int(rank)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c, err
}
