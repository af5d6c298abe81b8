package app

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/escrow"
)

// SystemAgent is the actor of what the service does by itself when an
// escrow's deadline passes (an auto-release, an unpaid link's expiry, a
// reminder).
const SystemAgent = "system"

// Deadline names an escrow's pending deadline as the deadlines read model
// lists it.
type Deadline struct {
	EscrowID    string
	Kind        escrow.DeadlineKind
	MerchantID  string
	Environment domain.Environment
	DueAt       time.Time
	Attempts    int
}

// ActOnDeadline does what deadline d asks of its escrow, now: an ordinary
// command, decided on the escrow's stream as it stands and appended at the
// revision it was decided on, so the deadline takes effect once however
// many processes act on it at the same time, and never against a buyer's
// confirmation or a dispute that came first (the loser's append conflicts,
// and its retry finds the escrow moved on and is refused).
func (s *Service) ActOnDeadline(ctx context.Context, d Deadline) (EscrowResult, error) {
	a := Actor{MerchantID: d.MerchantID, Environment: d.Environment, Agent: SystemAgent}
	return s.changeEscrow(ctx, a, d.EscrowID, func(_ *Tx, e escrow.State) (domain.Event, error) {
		switch d.Kind {
		case escrow.AutoReleaseDeadline:
			return escrow.AutoRelease(e, s.Engine.Now())
		case escrow.ExpiryDeadline:
			return escrow.Expire(e, s.Engine.Now())
		case escrow.WindowEndingDeadline:
			return escrow.RemindWindowEnding(e, s.Engine.Now())
		case escrow.MilestoneDueDeadline:
			return escrow.RemindMilestoneDue(e, s.Engine.Now())
		}
		return nil, domain.Errorf(domain.Internal, "unknown deadline kind %q", d.Kind)
	})
}

// ExtendWindow is the buyer's extension of an escrow's delivery window by
// by units of its deliveryTimeline; an auto-release moves with it.
func (s *Service) ExtendWindow(ctx context.Context, a Actor, buyerID, id string, by int) (EscrowResult, error) {
	return s.changeEscrow(ctx, a, id, func(_ *Tx, e escrow.State) (domain.Event, error) {
		return escrow.ExtendWindow(e, buyerID, by, s.Engine.Now())
	})
}

// DeadlineScheduler acts on escrows' deadlines as they pass. Every
// Interval it takes the deadlines due from the read model (Claim: only
// those due, by an index on their time, leased so that other processes
// skip them) and acts on each (Service.ActOnDeadline). It keeps no timer
// of its own: the deadlines live in the read model, built from the
// events, so a deadline that passed while no process ran is acted on by
// the first round after a start, and one whose command failed by a round
// after its lease.
type DeadlineScheduler struct {
	Service *Service
	// Claim takes up to limit deadlines due at now for lease (the
	// deadlines read model's ClaimDueDeadlines).
	Claim func(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Deadline, error)
	// Forget removes a deadline acted on, or one its escrow has moved past.
	Forget func(ctx context.Context, d Deadline) error
	// RemoveFiles removes the uploaded files of an escrow its expiry
	// deleted (EscrowFiles), so they are no longer served; nil keeps them
	// (orphan collection removes them later). What it fails to remove,
	// orphan collection removes.
	RemoveFiles func(ctx context.Context, urls []string) error
	Log         *zap.Logger
	// Interval between rounds (default DefaultDeadlineInterval); Lease is
	// how long a taken deadline is left to its taker before another round
	// may take it again (default DefaultDeadlineLease); Batch how many a
	// round takes at a time (default 100).
	Interval time.Duration
	Lease    time.Duration
	Batch    int
}

// The deadline scheduler's defaults. A deadline is acted on at most about
// an interval after it passes; a lease must outlast one command, or two
// processes do the same work (harmlessly: the second is refused).
const (
	DefaultDeadlineInterval = 10 * time.Second
	DefaultDeadlineLease    = time.Minute
)

func (r *DeadlineScheduler) settings() DeadlineScheduler {
	c := *r
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Interval <= 0 {
		c.Interval = DefaultDeadlineInterval
	}
	if c.Lease <= 0 {
		c.Lease = DefaultDeadlineLease
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	return c
}

// Run acts on deadlines about every Interval until ctx ends.
func (r *DeadlineScheduler) Run(ctx context.Context) error {
	c := r.settings()
	return runRounds(ctx, c.Interval, c.Log, "deadlines: round failed", func(ctx context.Context) error {
		_, err := r.Round(ctx)
		return err
	})
}

// Acted counts the deadlines a round acted on, by kind.
type Acted map[escrow.DeadlineKind]int

// Round acts on every deadline due now, a batch at a time, and returns how
// many of each kind took effect. A deadline whose escrow has moved on (confirmed,
// disputed, paid, deleted) is forgotten; one whose command failed
// otherwise is left to a round after its lease.
func (r *DeadlineScheduler) Round(ctx context.Context) (Acted, error) {
	c := r.settings()
	done := Acted{}
	for {
		due, err := c.Claim(ctx, c.Service.Engine.Now(), c.Lease, c.Batch)
		if err != nil {
			return done, err
		}
		for _, d := range due {
			if ctx.Err() != nil {
				return done, ctx.Err()
			}
			if c.act(ctx, d) {
				done[d.Kind]++
			}
		}
		if len(due) < c.Batch {
			return done, nil
		}
	}
}

// act runs one deadline's command and reports whether it took effect.
func (c *DeadlineScheduler) act(ctx context.Context, d Deadline) bool {
	log := c.Log.With(zap.String("escrow_id", d.EscrowID), zap.String("kind", string(d.Kind)),
		zap.Time("due_at", d.DueAt), zap.Int("attempts", d.Attempts))
	var owned []string
	if d.Kind == escrow.ExpiryDeadline && c.RemoveFiles != nil {
		// Read before the deletion: a deleted escrow has no files of its own.
		var err error
		if owned, err = c.Service.EscrowFiles(ctx, d.EscrowID); err != nil {
			log.Warn("deadlines: cannot read the escrow's files; orphan collection removes them", zap.Error(err))
		}
	}
	_, err := c.Service.ActOnDeadline(ctx, d)
	switch {
	case err == nil:
		log.Info("deadlines: acted")
		if len(owned) > 0 {
			if rerr := c.RemoveFiles(context.WithoutCancel(ctx), owned); rerr != nil {
				log.Warn("deadlines: cannot remove the expired escrow's files; orphan collection removes them", zap.Error(rerr))
			}
		}
	case errors.Is(err, escrow.ErrNotDue):
		// The read model is behind a change of the deadline (the window
		// extended): the projector moves the row, the lease holds it
		// until then.
		log.Debug("deadlines: not due yet", zap.Error(err))
		return false
	case refusedByEscrow(err) && !c.Service.awaits(ctx, d):
		// The escrow moved on before the deadline acted (a confirmation,
		// a dispute, a payment): nothing to do, now or later.
		log.Debug("deadlines: escrow moved on", zap.Error(err))
	default:
		log.Warn("deadlines: cannot act yet", zap.Error(err))
		return false
	}
	if ferr := c.Forget(ctx, d); ferr != nil && ctx.Err() == nil {
		log.Warn("deadlines: cannot forget a deadline", zap.Error(ferr))
	}
	return err == nil
}

// awaits reports whether d's escrow, as stored, still awaits d (true when
// it cannot be read: the deadline is kept for a later round).
func (s *Service) awaits(ctx context.Context, d Deadline) bool {
	e, _, err := Load(ctx, s.Engine, EscrowKind, d.EscrowID)
	return err != nil || e.Awaits(d.Kind)
}

// refusedByEscrow reports whether err is the domain refusing the
// deadline's decision on the escrow's state (a rule, not an outage).
func refusedByEscrow(err error) bool {
	switch domain.ErrorCode(err) {
	case domain.Invalid, domain.NotFound, domain.Conflict:
		return true
	}
	return false
}
