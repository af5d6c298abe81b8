// A tenant's events: the merchant's (and a customer's) slice of the log.

package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/escrowd/escrowd/eventstore"
)

// ReadTenant reads one tenant's events through es_events_tenant_idx,
// under the same horizon as ReadAll.
func (s *Store) ReadTenant(ctx context.Context, f eventstore.TenantFilter, after eventstore.Position, skip, limit int) ([]eventstore.RecordedEvent, error) {
	if limit <= 0 {
		limit = 1000
	}
	h, err := s.horizon(ctx)
	if err != nil {
		return nil, err
	}
	where, args := tenantWhere(f, h)
	query, args := tenantQuery(where, args, after, skip, limit)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// tenantQuery is ReadTenant's statement.
func tenantQuery(where string, args []any, after eventstore.Position, skip, limit int) (string, []any) {
	args = append(args, strconv.FormatUint(after.Commit, 10), int64(after.Prepare), limit, max(skip, 0))
	n := len(args)
	return `SELECT ` + eventColumns + ` FROM es_events WHERE ` + where +
		fmt.Sprintf(` AND (tx_id, seq) > ($%d::text::xid8, $%d)`, n-3, n-2) +
		` ORDER BY es_events.tx_id, es_events.seq` + fmt.Sprintf(` LIMIT $%d OFFSET $%d`, n-1, n), args
}

// CountTenant counts the events ReadTenant can return.
func (s *Store) CountTenant(ctx context.Context, f eventstore.TenantFilter) (int64, error) {
	h, err := s.horizon(ctx)
	if err != nil {
		return 0, err
	}
	where, args := tenantWhere(f, h)
	var n int64
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM es_events WHERE `+where, args...).Scan(&n)
	return n, err
}

// tenantWhere is the condition of a tenant's events below horizon h; its
// first two terms are the leading columns of es_events_tenant_idx, written
// exactly as the index's expressions so the planner matches them.
func tenantWhere(f eventstore.TenantFilter, h string) (string, []any) {
	where := `(metadata ->> 'merchantId') = $1 AND (metadata ->> 'environment') = $2
		AND tx_id < $3::text::xid8`
	args := []any{f.MerchantID, f.Environment, h}
	if f.Type != "" {
		args = append(args, f.Type)
		if f.TypePrefix() {
			where += fmt.Sprintf(` AND starts_with(event_type, $%d)`, len(args))
		} else {
			where += fmt.Sprintf(` AND event_type = $%d`, len(args))
		}
	}
	if !f.From.IsZero() {
		args = append(args, f.From)
		where += fmt.Sprintf(` AND recorded_at >= $%d`, len(args))
	}
	if !f.To.IsZero() {
		args = append(args, f.To)
		where += fmt.Sprintf(` AND recorded_at < $%d`, len(args))
	}
	return where, args
}
