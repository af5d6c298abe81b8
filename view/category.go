package view

import (
	"time"

	"github.com/escrowd/escrowd/domain/category"
)

// Category is a merchant's escrow category record.
type Category struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	ImageURL    string `json:"imageUrl"`
	// Position is the category's 1-based place in listings; 0 (omitted)
	// where it is not known, as in an escrow's copy.
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
