package projections

import "context"

// fileReferencesSQL lists every file URL a live record shows: the images
// and dispute evidence of escrows not deleted (a sold unit is an escrow of
// its own showing its link's images) and the images of categories not
// deleted. Rows are streamed; nothing but the URLs is read out.
const fileReferencesSQL = `
SELECT u FROM rm_escrows,
    json_array_elements_text(CASE WHEN json_typeof(state->'imageUrl') = 'array' THEN state->'imageUrl' ELSE '[]'::json END) u
  WHERE NOT deleted
UNION ALL
SELECT d->>'proofUrl' FROM rm_escrows,
    json_array_elements(CASE WHEN json_typeof(state->'disputes') = 'array' THEN state->'disputes' ELSE '[]'::json END) d
  WHERE NOT deleted AND coalesce(d->>'proofUrl', '') <> ''
UNION ALL
SELECT image_url FROM rm_categories WHERE deleted_at IS NULL AND image_url <> ''`

// FileReferencesNames are the read models FileReferences reads: a caller
// deciding that a file is referred to by nothing waits for these.
var FileReferencesNames = []string{EscrowsName, CategoriesName}

// FileReferences calls fn with every file URL a live escrow or category
// shows (the same URL may come more than once). It answers from the read
// models as they are: a caller that decides from it that a file is an
// orphan first waits for FileReferencesNames to reach the log's head.
func (q *Queries) FileReferences(ctx context.Context, fn func(url string)) error {
	rows, err := q.pool.Query(ctx, fileReferencesSQL)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return err
		}
		fn(u)
	}
	return rows.Err()
}
