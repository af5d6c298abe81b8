package projections

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
)

// Category is a merchant's escrow category record.
type Category struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	MerchantID  string    `json:"merchantId"`
	Environment string    `json:"environment"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// CategoryOf is the view of a category aggregate, as the read model holds
// it: times in UTC, to the microsecond PostgreSQL stores.
func CategoryOf(st category.State) Category {
	return Category{ID: st.ID, Name: st.Name, Description: st.Description, MerchantID: st.MerchantID,
		Environment: string(st.Environment), CreatedAt: st.CreatedAt.UTC().Truncate(time.Microsecond),
		UpdatedAt: st.UpdatedAt.UTC().Truncate(time.Microsecond)}
}

// CategoryByID returns a live (not deleted) category of any merchant: the
// caller decides ownership from MerchantID and Environment.
func (q *Queries) CategoryByID(ctx context.Context, id string) (Category, bool, error) {
	c, err := scanCategory(q.pool.QueryRow(ctx, `SELECT `+categoryColumns+`
		FROM rm_categories WHERE category_id = $1 AND deleted_at IS NULL`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	return c, err == nil, err
}

// ListCategories pages a merchant's live categories of env, newest first.
func (q *Queries) ListCategories(ctx context.Context, merchantID string, env domain.Environment, p Page) ([]Category, Pagination, error) {
	var count int64
	if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM rm_categories
		WHERE merchant_id = $1 AND environment = $2 AND deleted_at IS NULL`, merchantID, string(env)).Scan(&count); err != nil {
		return nil, Pagination{}, err
	}
	rows, err := q.pool.Query(ctx, `SELECT `+categoryColumns+` FROM rm_categories
		WHERE merchant_id = $1 AND environment = $2 AND deleted_at IS NULL
		ORDER BY created_at DESC, seq DESC LIMIT $3 OFFSET $4`, merchantID, string(env), p.Limit, (p.Page-1)*p.Limit)
	if err != nil {
		return nil, Pagination{}, err
	}
	defer rows.Close()
	out := []Category{}
	for rows.Next() {
		c, err := scanCategory(rows)
		if err != nil {
			return nil, Pagination{}, err
		}
		out = append(out, c)
	}
	return out, NewPagination(p, count), rows.Err()
}

const categoryColumns = `category_id, name, description, merchant_id, environment, created_at, updated_at`

func scanCategory(row pgx.Row) (Category, error) {
	var c Category
	err := row.Scan(&c.ID, &c.Name, &c.Description, &c.MerchantID, &c.Environment, &c.CreatedAt, &c.UpdatedAt)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c, err
}
