// Parking a poison event: a projector that keeps failing on one event
// stops there instead of holding every read back.

package projections

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

// defaultParkAfter is how many times in a row one event may fail before its
// projector parks it.
const defaultParkAfter = 3

// ErrParked is wrapped by the errors of reads and waits on a projector that
// parked an event (ParkedError).
var ErrParked = errors.New("projections: read model stopped at an event it cannot apply")

// Parked is the event a projector stopped at, and why.
type Parked struct {
	Position  eventstore.Position `json:"position"`
	EventID   string              `json:"eventId"`
	EventType string              `json:"eventType"`
	Stream    string              `json:"stream"`
	Reason    string              `json:"error"` // the projector's error on the event
	At        time.Time           `json:"at"`
}

// ParkedError is WaitFor's answer for a projector that parked an event short
// of the position waited for.
type ParkedError struct {
	Projector string
	Parked
}

func (e *ParkedError) Error() string {
	return fmt.Sprintf("projections: %s stopped at event %s (%s of %s at %s): %s",
		e.Projector, e.EventID, e.EventType, e.Stream, e.Position, e.Reason)
}

func (e *ParkedError) Unwrap() error { return ErrParked }

// poisonError is a failure to apply one event on its own.
type poisonError struct {
	event eventstore.RecordedEvent
	err   error
}

func (e *poisonError) Error() string {
	return fmt.Sprintf("event %s (%s of %s at %s): %v", e.event.ID, e.event.Type, e.event.Stream, e.event.Position, e.err)
}

func (e *poisonError) Unwrap() error { return e.err }

// transient reports failures that say nothing about the event being applied:
// the connection, the server going away, a conflict with another applier, a
// timeout. They are retried, never parked.
func transient(err error) bool {
	var (
		pgErr  *pgconn.PgError
		netErr net.Error
	)
	switch {
	case errors.Is(err, errResync), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		pgconn.Timeout(err), pgconn.SafeToRetry(err), errors.As(err, &netErr):
		return true
	case errors.As(err, &pgErr):
		switch pgErr.Code[:2] {
		case "08", "40", "53", "57", "58", "XX":
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

// park records that name stopped at the event of failure, unless an
// operator has just cleared it (the checkpoint is no longer before it).
func park(ctx context.Context, pool *pgxpool.Pool, name string, failure *poisonError) error {
	e := failure.event
	_, err := pool.Exec(ctx,
		`UPDATE projection_checkpoints
		    SET parked_commit = $2, parked_prepare = $3, parked_event_id = $4, parked_event_type = $5,
		        parked_stream = $6, parked_error = $7, parked_at = now(), last_error = $7, last_error_at = now()
		  WHERE name = $1`,
		name, toDB(e.Position.Commit), toDB(e.Position.Prepare), e.ID, e.Type, e.Stream, failure.err.Error())
	return err
}

// loadParked reads which of names have parked an event.
func loadParked(ctx context.Context, pool *pgxpool.Pool, names []string) (map[string]*Parked, error) {
	rows, err := pool.Query(ctx,
		`SELECT name, parked_commit, parked_prepare, parked_event_id::text, parked_event_type, parked_stream, parked_error, parked_at
		   FROM projection_checkpoints WHERE name = ANY($1) AND parked_at IS NOT NULL`, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*Parked{}
	for rows.Next() {
		var (
			n    string
			c, p int64
			pk   Parked
		)
		if err := rows.Scan(&n, &c, &p, &pk.EventID, &pk.EventType, &pk.Stream, &pk.Reason, &pk.At); err != nil {
			return nil, err
		}
		pk.Position = eventstore.Position{Commit: fromDB(c), Prepare: fromDB(p)}
		out[n] = &pk
	}
	return out, rows.Err()
}

// ErrNotParked is returned by Retry and Skip for a projector that parked
// nothing.
var ErrNotParked = errors.New("projections: the projector has parked no event")

// Retry clears name's parked event, so that its runner applies it again
// (after a fix of the projector or of the data it writes). It returns the
// event that was parked.
func Retry(ctx context.Context, pool *pgxpool.Pool, name string) (Parked, error) {
	return unpark(ctx, pool, name, false)
}

// Skip moves name's checkpoint past its parked event, which its read models
// will then never include, and clears it. It returns the event skipped.
func Skip(ctx context.Context, pool *pgxpool.Pool, name string) (Parked, error) {
	return unpark(ctx, pool, name, true)
}

func unpark(ctx context.Context, pool *pgxpool.Pool, name string, skip bool) (Parked, error) {
	parked, err := loadParked(ctx, pool, []string{name})
	if err != nil {
		return Parked{}, err
	}
	pk := parked[name]
	if pk == nil {
		return Parked{}, fmt.Errorf("%w: %s", ErrNotParked, name)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		pos, err := lockCheckpoint(ctx, tx, name)
		if err != nil {
			return err
		}
		move := skip && pos.Less(pk.Position)
		tag, err := tx.Exec(ctx,
			`UPDATE projection_checkpoints
			    SET commit_pos = CASE WHEN $3 THEN $4 ELSE commit_pos END,
			        prepare_pos = CASE WHEN $3 THEN $5 ELSE prepare_pos END,
			        updated_at = CASE WHEN $3 THEN now() ELSE updated_at END,
			        parked_commit = NULL, parked_prepare = NULL, parked_event_id = NULL, parked_event_type = NULL,
			        parked_stream = NULL, parked_error = NULL, parked_at = NULL, last_error = NULL, last_error_at = NULL
			  WHERE name = $1 AND parked_event_id = $2::uuid`,
			name, pk.EventID, move, toDB(pk.Position.Commit), toDB(pk.Position.Prepare))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%w: %s (cleared meanwhile)", ErrNotParked, name)
		}
		return err
	})
	return *pk, err
}
