package projections

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/escrowd/escrowd/domain/category"
)

// Category is a merchant's escrow category record.
type Category struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	ImageURL    string `json:"imageUrl"`
	// Position is the category's 1-based place in listings (api-decisions
	// §7); 0 (omitted) where it is not known, as in an escrow's copy.
	Position    int       `json:"position,omitempty"`
	MerchantID  string    `json:"merchantId"`
	Environment string    `json:"environment"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// CategoryOf is the view of a category aggregate, as the read model holds
// it: times in UTC, to the microsecond PostgreSQL stores.
func CategoryOf(st category.State) Category {
	return Category{ID: st.ID, Name: st.Name, Description: st.Description, ImageURL: st.ImageURL, MerchantID: st.MerchantID,
		Environment: string(st.Environment), CreatedAt: st.CreatedAt.UTC().Truncate(time.Microsecond),
		UpdatedAt: st.UpdatedAt.UTC().Truncate(time.Microsecond)}
}

// CategoryByID returns a live (not deleted) category of any merchant: the
// caller decides ownership from MerchantID and Environment.
func (q *Queries) CategoryByID(ctx context.Context, id string) (Category, bool, error) {
	c, err := scanCategory(q.pool.QueryRow(ctx, `SELECT `+categoryColumns+` FROM (
		SELECT *, `+categoryRank+` AS rank FROM rm_categories
		WHERE (merchant_id, environment) = (SELECT merchant_id, environment FROM rm_categories WHERE category_id = $1)
		  AND deleted_at IS NULL) ranked WHERE category_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	return c, err == nil, err
}

// categoryRank numbers a merchant environment's live categories 1..n: the
// ordered ones by their position, then those created before categories had
// positions, newest first (as listings were).
const categoryRank = `row_number() OVER (ORDER BY position IS NULL, position, created_at DESC, seq DESC)`

const categoryColumns = `category_id, name, description, image_url, rank, merchant_id, environment, created_at, updated_at`

func scanCategory(row pgx.Row) (Category, error) {
	var c Category
	var rank int64
	err := row.Scan(&c.ID, &c.Name, &c.Description, &c.ImageURL, &rank, &c.MerchantID, &c.Environment, &c.CreatedAt, &c.UpdatedAt)
	c.Position = int(rank)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c, err
}
