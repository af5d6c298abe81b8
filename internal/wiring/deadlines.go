package wiring

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// DeadlineScheduler acts on escrows' deadlines from the deadlines read
// model. Every API process runs one: the read model's lease spreads the
// due deadlines among them, and each command's expected revision makes a
// deadline act once whatever they do.
func DeadlineScheduler(svc *app.Service, q *projections.Queries, log *zap.Logger) *app.DeadlineScheduler {
	return &app.DeadlineScheduler{Service: svc, Claim: claimDeadlines(q), Log: log,
		Forget: func(ctx context.Context, d app.Deadline) error {
			return q.ForgetDeadline(ctx, projections.Deadline{EscrowID: d.EscrowID, Kind: d.Kind, DueAt: d.DueAt})
		}}
}

// claimDeadlines takes the deadlines due. Until the deadlines projector
// of this version has run (an API upgraded before the projector role), its
// table is missing: nothing is due.
func claimDeadlines(q *projections.Queries) func(context.Context, time.Time, time.Duration, int) ([]app.Deadline, error) {
	return func(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]app.Deadline, error) {
		ds, err := q.ClaimDueDeadlines(ctx, now, lease, limit)
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42P01" {
			return nil, nil
		}
		out := make([]app.Deadline, len(ds))
		for i, d := range ds {
			out[i] = app.Deadline{EscrowID: d.EscrowID, Kind: d.Kind, MerchantID: d.MerchantID,
				Environment: d.Environment, DueAt: d.DueAt, Attempts: d.Attempts}
		}
		return out, err
	}
}
