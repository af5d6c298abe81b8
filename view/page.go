package view

import "github.com/escrowd/escrowd/domain"

// Page is a page request (1-based), or with After the page of rows after
// the row whose id After is (the cursor form, docs/listings.md).
type Page struct {
	Page, Limit int
	After       string
}

// Pagination is the spec's pagination object.
type Pagination struct {
	Count        int64 `json:"count"`
	Pages        int64 `json:"pages"`
	IsLastPage   bool  `json:"isLastPage"`
	NextPage     *int  `json:"nextPage"`
	PreviousPage *int  `json:"previousPage"`
	// NextCursor is the id of the page's last row when more rows follow
	// it: the startingAfter of the next page in the cursor form.
	NextCursor *string `json:"nextCursor"`
}

// BoundedCount is where a count that no projector keeps stops (a filter
// on a date range, a reference; the webhook delivery log): such a count
// reads at most this many rows, and page numbers end there; the cursor
// form reaches every row (docs/listings.md).
const BoundedCount = 10000

// NewPagination computes the pagination object of a page over count rows.
func NewPagination(p Page, count int64) Pagination {
	pages := (count + int64(p.Limit) - 1) / int64(p.Limit)
	if pages == 0 {
		pages = 1
	}
	pg := Pagination{Count: count, Pages: pages, IsLastPage: int64(p.Page) >= pages}
	if !pg.IsLastPage {
		n := p.Page + 1
		pg.NextPage = &n
	}
	if p.Page > 1 {
		prev := p.Page - 1
		if int64(prev) > pages {
			prev = int(pages)
		}
		pg.PreviousPage = &prev
	}
	return pg
}

// PageOf is the pagination object of a page p over count rows whose
// last row, when more follow, is next: p's page, or in the cursor form
// (p.After set) a page that is last when nothing follows, without page
// numbers.
func PageOf(p Page, count int64, next *string) Pagination {
	if p.After == "" {
		pg := NewPagination(p, count)
		pg.NextCursor = next
		return pg
	}
	pg := NewPagination(Page{Page: 1, Limit: p.Limit}, count)
	pg.IsLastPage, pg.NextPage, pg.PreviousPage, pg.NextCursor = next == nil, nil, nil, next
	return pg
}

// ErrUnknownCursor is returned for a startingAfter that names no row of
// the tenant's listing.
var ErrUnknownCursor = domain.Invalidf("startingAfter must be the id of a row of this listing")
