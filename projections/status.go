package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/eventstore"
)

// ProjectorStatus is the state of one projector as stored in the database.
type ProjectorStatus struct {
	Name       string              `json:"name"`
	Checkpoint eventstore.Position `json:"checkpoint"`
	Head       eventstore.Position `json:"head"`
	// Lag is the number of events after Checkpoint up to Head.
	Lag int64 `json:"lag"`
	// Active reports whether some session holds the projector's advisory
	// lock (a runner, or a catch-up), in any process.
	Active      bool       `json:"active"`
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// UpdatedAt is when the checkpoint last moved; nil if it never existed.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	// Parked is the event the projector stopped at, until an operator
	// retries or skips it (escrowd projections retry|skip).
	Parked *Parked `json:"parked,omitempty"`
}

// EventCounter is implemented by event stores that can count a range of the
// global log without reading it. Status, Lag and Rebuild use it when the
// store has it and page through ReadAll otherwise.
type EventCounter interface {
	// CountEvents counts the events strictly after after and at or before
	// upTo, at most limit of them when limit > 0.
	CountEvents(ctx context.Context, after, upTo eventstore.Position, limit int64) (int64, error)
}

// countEvents counts events in (after, upTo]; with limit > 0 the count is
// capped at limit, whichever way the store counts.
func countEvents(ctx context.Context, store eventstore.Store, after, upTo eventstore.Position, limit int64) (int64, error) {
	if after.AtLeast(upTo) {
		return 0, nil
	}
	if c, ok := store.(EventCounter); ok {
		return c.CountEvents(ctx, after, upTo, limit)
	}
	const page = 1000
	var n int64
	for limit <= 0 || n < limit {
		events, err := store.ReadAll(ctx, after, page)
		if err != nil {
			return 0, err
		}
		for _, e := range events {
			if upTo.Less(e.Position) {
				return n, nil
			}
			n++
		}
		if len(events) < page {
			break
		}
		after = events[len(events)-1].Position
	}
	if limit > 0 {
		n = min(n, limit)
	}
	return n, nil
}

// Status reports each of ps: its checkpoint, the head, the lag in events
// between them, whether any session is running it (from pg_locks), its last
// error and when its checkpoint last moved. It works from any process.
func Status(ctx context.Context, pool *pgxpool.Pool, store eventstore.Store, ps ...Projector) ([]ProjectorStatus, error) {
	head, err := store.Head(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name()
	}
	// An int8 advisory lock key shows in pg_locks split into classid (high
	// 32 bits) and objid (low 32 bits), with objsubid 1.
	rows, err := pool.Query(ctx, `
		SELECT n.name, c.commit_pos, c.prepare_pos, c.last_error, c.last_error_at, c.updated_at,
		       EXISTS (SELECT 1 FROM pg_locks l
		                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		                  AND l.classid::bigint = (hashtext('projection:' || n.name)::bigint >> 32) & 4294967295
		                  AND l.objid::bigint = hashtext('projection:' || n.name)::bigint & 4294967295)
		  FROM unnest($1::text[]) AS n(name)
		  LEFT JOIN projection_checkpoints c ON c.name = n.name`, names)
	if err != nil {
		return nil, err
	}
	byName := map[string]ProjectorStatus{}
	for rows.Next() {
		var (
			s         ProjectorStatus
			commit    *int64
			prepare   *int64
			lastErr   *string
			lastErrAt *time.Time
			updatedAt *time.Time
		)
		if err := rows.Scan(&s.Name, &commit, &prepare, &lastErr, &lastErrAt, &updatedAt, &s.Active); err != nil {
			rows.Close()
			return nil, err
		}
		if commit != nil && prepare != nil {
			s.Checkpoint = eventstore.Position{Commit: fromDB(*commit), Prepare: fromDB(*prepare)}
		}
		if lastErr != nil {
			s.LastError = *lastErr
		}
		s.LastErrorAt, s.UpdatedAt = lastErrAt, updatedAt
		byName[s.Name] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	parked, err := loadParked(ctx, pool, names)
	if err != nil {
		return nil, err
	}
	out := make([]ProjectorStatus, len(ps))
	for i, name := range names {
		s := byName[name]
		s.Name, s.Head, s.Parked = name, head, parked[name]
		if s.Lag, err = countEvents(ctx, store, s.Checkpoint, head, 0); err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
