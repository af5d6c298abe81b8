package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Clock is the database's clock: the one time every process on the
// database shares, whatever the clocks of their machines say. Leases that
// several processes take, compare and give up (the payout lease) are kept
// on it, so that a process whose own clock runs ahead never takes a lease
// another still holds.
func Clock(pool *pgxpool.Pool) func(context.Context) (time.Time, error) {
	return func(ctx context.Context) (time.Time, error) {
		var now time.Time
		err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
		return now.UTC(), err
	}
}
