package app

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/payment"
)

// ResumerAgent is the actor the payout resumer's events record.
const ResumerAgent = "payout-resumer"

// PayoutResumer finishes withdrawals left debited and unpaid: a verify
// interrupted after the debit (a crash, a client that hung up before
// the payout step), or one whose provider did not answer, is sent again;
// one the provider accepted and whose event has not come within
// Service.PayoutPollAfter is polled. Without it the customer's money stays
// in clearing until someone verifies again or the provider's event comes.
//
// Every Interval it lists the withdrawals debited more than Grace ago and
// still paying out, and resumes each (Service.ResumePayout): the payout
// lease makes it safe to run in every API process, and beside verifies: a
// payout whose lease another holder has is skipped until the next round.
type PayoutResumer struct {
	Service *Service
	// Find lists withdrawals debited before a time, oldest first, from the
	// one after after (the last of the previous page; zero for the first)
	// (the ledger read model's PayoutsInFlightAfter).
	Find func(ctx context.Context, after PayoutRef, before time.Time, limit int) ([]PayoutRef, error)
	Log  *zap.Logger
	// Interval between rounds (default 30 s); Grace is how long after its
	// debit a withdrawal is left to its verify (default the payout lease:
	// by then a verify that debited it has finished or lost its lease).
	Interval time.Duration
	Grace    time.Duration
	// Batch is how many withdrawals a round lists at a time (default 100);
	// a round pages through all that are due, so that withdrawals it
	// cannot settle (held, unanswered) never hide the ones after them.
	Batch int
}

// PayoutRef names a withdrawal paying out, and when it was debited.
type PayoutRef struct {
	MerchantID  string
	Environment domain.Environment
	Reference   string
	DebitedAt   time.Time
}

// settings are the resumer's fields with their defaults filled in; it
// leaves r as it is, so that rounds may run concurrently.
func (r *PayoutResumer) settings() PayoutResumer {
	c := *r
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Interval <= 0 {
		c.Interval = 30 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = payment.PayoutLease
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	return c
}

// Run resumes payouts about every Interval until ctx ends. Each pause is
// drawn between three quarters and five quarters of Interval, so that the
// rounds of API processes started together drift apart instead of asking
// the read model and the same withdrawals' streams at the same moments.
func (r *PayoutResumer) Run(ctx context.Context) error {
	c := r.settings()
	return runRounds(ctx, c.Interval, c.Log, "payouts: resume round failed", func(ctx context.Context) error {
		_, err := r.Round(ctx)
		return err
	})
}

// runRounds runs round at once and then about every interval (jittered)
// until ctx ends, logging a failed round as failed.
func runRounds(ctx context.Context, interval time.Duration, log *zap.Logger, failed string, round func(context.Context) error) error {
	t := time.NewTimer(jittered(interval, rand.Float64()))
	defer t.Stop()
	for {
		if err := round(ctx); err != nil && ctx.Err() == nil {
			log.Warn(failed, zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			t.Reset(jittered(interval, rand.Float64()))
		}
	}
}

// jittered is d scaled by 0.75 + u/2, for u in [0, 1).
func jittered(d time.Duration, u float64) time.Duration {
	return time.Duration(float64(d) * (0.75 + u/2))
}

// Round resumes the withdrawals Find lists now, one after the other, and
// returns how many it settled (paid out or reversed). A withdrawal whose
// provider does not answer, or whose lease another holder has, is left for
// a later round, as is one whose customer may not withdraw now
// (ErrPayoutHeld); an error only stops the round when listing fails.
func (r *PayoutResumer) Round(ctx context.Context) (int, error) {
	c := r.settings()
	before := c.Service.Engine.Now().Add(-c.Grace)
	settled := 0
	for after := (PayoutRef{}); ; {
		due, err := c.Find(ctx, after, before, c.Batch)
		if err != nil {
			return settled, err
		}
		if err := c.resume(ctx, due, &settled); err != nil {
			return settled, err
		}
		if len(due) < c.Batch {
			return settled, nil
		}
		after = due[len(due)-1]
	}
}

// resume resumes the withdrawals of one page, counting those settled.
func (c *PayoutResumer) resume(ctx context.Context, due []PayoutRef, settled *int) error {
	for _, p := range due {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rec, done, err := c.Service.ResumePayout(ctx, p.MerchantID, p.Environment, p.Reference, ResumerAgent)
		log := c.Log.With(zap.String("merchant_id", p.MerchantID), zap.String("environment", string(p.Environment)),
			zap.String("reference", p.Reference))
		switch {
		case errors.Is(err, payment.ErrPayoutInProgress):
			// Another holder is asking the provider.
		case errors.Is(err, ErrPayoutHeld):
			// Held on purpose until the customer may withdraw again: the
			// customer's state says so; a warning every round would not.
			log.Debug("payouts: withdrawal held", zap.Error(err))
		case err != nil:
			log.Warn("payouts: cannot resume a withdrawal yet", zap.Error(err))
		case done:
			*settled++
			log.Info("payouts: resumed withdrawal settled", zap.String("status", string(rec.Status)))
		}
	}
	return nil
}
