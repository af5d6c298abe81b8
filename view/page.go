package view

// Page is a page request (1-based).
type Page struct {
	Page, Limit int
}

// Pagination is the spec's pagination object.
type Pagination struct {
	Count        int64 `json:"count"`
	Pages        int64 `json:"pages"`
	IsLastPage   bool  `json:"isLastPage"`
	NextPage     *int  `json:"nextPage"`
	PreviousPage *int  `json:"previousPage"`
}

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
