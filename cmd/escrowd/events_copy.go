package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/kurrent"
	"github.com/escrowd/escrowd/eventstore/postgres"
)

// eventsCopy implements `escrowd events copy --to kurrent [--url URL]
// [--switch]`: every stream of the PostgreSQL event store, as of its head
// when the copy starts, is appended to KurrentDB with the same event ids,
// types, data, metadata and revisions, one source transaction per append
// (atomic there too), in the source's order. Each append expects the
// stream at the revision before its first event, so a copy that stopped
// half way runs again from the start: what is copied already is repeated
// (the same ids at the same place, which KurrentDB takes as a no-op), and
// a stream that holds anything else there fails the copy instead of being
// mixed with it. Then every copied stream is read back from both stores
// and compared event by event.
//
// --switch moves the checkpoints of the projections and the webhook
// subscriber, stored in PostgreSQL as positions of the source log, to the
// matching positions of the copy, so that a service restarted with
// ESCROW_EVENT_STORE=kurrent resumes where it stopped: nothing is applied
// or sent twice, nothing skipped. It needs the service stopped (the source
// must not move during the copy) and every checkpoint at the end of a
// source transaction, which it is once the runners have caught up.
var eventsCopyCommand = &command{
	name: "events copy", args: "--to kurrent [--url URL] [--switch]",
	summary: "copy the PostgreSQL event log to KurrentDB, streams and revisions, and check the copy",
	detail: `Run it with ESCROW_EVENT_STORE=postgres (the source). --url defaults to
$KURRENTDB_URL. --switch also moves the projection and webhook checkpoints
to the copy's positions, so the service can then run on KurrentDB.`,
	database: true,
	required: []string{"to"},
	define: func(fs *flag.FlagSet) runFunc {
		to := fs.String("to", "", "the destination store: kurrent (required)")
		url := fs.String("url", os.Getenv("KURRENTDB_URL"), "KurrentDB connection string (default $KURRENTDB_URL)")
		switchOver := fs.Bool("switch", false, "move the projection and webhook checkpoints to the copy's positions")
		return func(ctx context.Context, inv *invocation) error {
			if *to != "kurrent" {
				return usageError("--to must be kurrent")
			}
			if *url == "" {
				return usageError("--url or KURRENTDB_URL is required")
			}
			return eventsCopy(ctx, inv.env, *url, *switchOver)
		}
	},
}

// eventsCopy copies the PostgreSQL event log to the KurrentDB at url and
// checks the copy; switchOver moves the checkpoints to it.
func eventsCopy(ctx context.Context, env *cliEnv, url string, switchOver bool) error {
	if _, ok := env.Raw.(*postgres.Store); !ok {
		return errors.New("events copy: the source is the PostgreSQL event store: run it with ESCROW_EVENT_STORE=postgres")
	}
	dst, err := kurrent.Open(url)
	if err != nil {
		return err
	}
	defer dst.Close()
	if err := dst.CheckServer(ctx); err != nil {
		return err
	}
	c, err := copyEvents(ctx, env.Raw, dst, env.Stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "copied %d events of %d streams in %d transactions\n", c.events, len(c.streams), len(c.batches))
	if err := c.check(ctx, env.Raw, dst); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "copied and checked %d events of %d streams to KurrentDB\n", c.events, len(c.streams))
	if !switchOver {
		fmt.Fprintln(env.Stdout, "checkpoints not moved (no --switch): the service still runs on PostgreSQL positions")
		return nil
	}
	if now, err := env.Store.Last(ctx); err != nil {
		return err
	} else if now != c.head {
		return fmt.Errorf("events copy: the source moved during the copy (head %v, then %v): stop the service and run the copy again", c.head, now)
	}
	moved, err := c.switchCheckpoints(ctx, env)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "moved %d checkpoints to the copy's positions: restart the service with ESCROW_EVENT_STORE=kurrent\n", moved)
	return nil
}

// copied is what a copy wrote: each source transaction's last position and
// the position of its copy, and each stream's next revision.
type copied struct {
	head    eventstore.Position
	batches []copiedBatch
	streams map[string]uint64
	events  int
}

type copiedBatch struct{ src, dst eventstore.Position }

func copyEvents(ctx context.Context, src, dst eventstore.Store, progress io.Writer) (*copied, error) {
	head, err := readableLast(ctx, src, progress)
	if err != nil {
		return nil, err
	}
	c := &copied{head: head, streams: map[string]uint64{}}
	var txn []eventstore.RecordedEvent // one source transaction
	flush := func() error {
		if len(txn) == 0 {
			return nil
		}
		var appends []eventstore.StreamAppend
		at := map[string]int{}
		for _, e := range txn {
			i, ok := at[e.Stream]
			if !ok {
				i = len(appends)
				at[e.Stream] = i
				exp := eventstore.NoStream
				if e.Revision > 0 {
					exp = eventstore.Exact(e.Revision - 1)
				}
				appends = append(appends, eventstore.StreamAppend{Stream: e.Stream, Expected: exp})
			}
			// The source's log holds every stream from revision 0 without
			// a gap; anything else would be copied wrong.
			if next := c.streams[e.Stream]; e.Revision != next {
				return fmt.Errorf("events copy: %s event at revision %d follows revision %d in the source log", e.Stream, e.Revision, int64(next)-1)
			}
			appends[i].Events = append(appends[i].Events, eventstore.EventData{ID: e.ID, Type: e.Type, Data: e.Data, Metadata: e.Metadata})
			c.streams[e.Stream] = e.Revision + 1
		}
		res, err := dst.Append(ctx, appends...)
		if err != nil {
			return fmt.Errorf("events copy: transaction at %v: %w", txn[0].Position, err)
		}
		for _, a := range appends {
			if want := c.streams[a.Stream] - 1; res.Revisions[a.Stream] != want {
				return fmt.Errorf("events copy: %s copied to revision %d; the source has it at %d", a.Stream, res.Revisions[a.Stream], want)
			}
		}
		c.batches = append(c.batches, copiedBatch{src: txn[len(txn)-1].Position, dst: res.Position})
		c.events += len(txn)
		txn = txn[:0]
		return nil
	}
	for after := eventstore.Start; after.Less(head); {
		evs, err := src.ReadAll(ctx, after, 2000)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if head.Less(e.Position) {
				break
			}
			// PostgreSQL's commit position is the writing transaction.
			if len(txn) > 0 && txn[0].Position.Commit != e.Position.Commit {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			txn = append(txn, e)
		}
		after = evs[len(evs)-1].Position
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return c, nil
}

// readableLast waits until the source's ReadAll can return every event
// committed before the call (PostgreSQL holds committed events back while
// an older transaction anywhere on its server is open) and returns that
// position: a copy up to Head alone could leave such events behind
// unnoticed.
func readableLast(ctx context.Context, src eventstore.Store, progress io.Writer) (eventstore.Position, error) {
	last, err := src.Last(ctx)
	if err != nil {
		return eventstore.Position{}, err
	}
	for waited := time.Duration(0); ; waited += 50 * time.Millisecond {
		head, err := src.Head(ctx)
		if err != nil {
			return eventstore.Position{}, err
		}
		if head.AtLeast(last) {
			return last, nil
		}
		if waited == 2*time.Second {
			fmt.Fprintf(progress, "waiting for events held back by an open transaction (head %v, last %v): see escrowd projections status\n", head, last)
		}
		select {
		case <-ctx.Done():
			return eventstore.Position{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// check reads every copied stream back from both stores and compares them.
func (c *copied) check(ctx context.Context, src, dst eventstore.Store) error {
	names := make([]string, 0, len(c.streams))
	for s := range c.streams {
		names = append(names, s)
	}
	slices.Sort(names)
	for _, s := range names {
		want, err := src.ReadStream(ctx, s, 0, int(c.streams[s]))
		if err != nil {
			return err
		}
		got, err := dst.ReadStream(ctx, s, 0, 0)
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("events copy: check: %s has %d events in KurrentDB; the source has %d", s, len(got), len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.ID != w.ID || g.Revision != w.Revision || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) || !bytes.Equal(g.Metadata, w.Metadata) {
				return fmt.Errorf("events copy: check: %s revision %d differs: KurrentDB has %s %s %s, the source %s %s %s",
					s, w.Revision, g.ID, g.Type, g.Data, w.ID, w.Type, w.Data)
			}
		}
	}
	return nil
}

// switchCheckpoints moves every stored checkpoint from its source position
// to the position of the copy of the transaction it ends with.
func (c *copied) switchCheckpoints(ctx context.Context, env *cliEnv) (int, error) {
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, `SELECT name, commit_pos, prepare_pos FROM projection_checkpoints FOR UPDATE`)
	if err != nil {
		return 0, err
	}
	type move struct {
		name string
		to   eventstore.Position
	}
	var moves []move
	for rows.Next() {
		var (
			name string
			cp   int64
			pp   int64
		)
		if err := rows.Scan(&name, &cp, &pp); err != nil {
			rows.Close()
			return 0, err
		}
		at := eventstore.Position{Commit: uint64(cp), Prepare: uint64(pp)}
		to, err := c.translate(at)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("events copy: checkpoint %s: %w", name, err)
		}
		moves = append(moves, move{name, to})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, m := range moves {
		if _, err := tx.Exec(ctx, `UPDATE projection_checkpoints SET commit_pos = $2, prepare_pos = $3, updated_at = now() WHERE name = $1`,
			m.name, int64(m.to.Commit), int64(m.to.Prepare)); err != nil {
			return 0, err
		}
	}
	return len(moves), tx.Commit(ctx)
}

// translate maps a source position that ends a copied transaction (or the
// start) to the position of its copy.
func (c *copied) translate(at eventstore.Position) (eventstore.Position, error) {
	if at == eventstore.Start {
		return eventstore.Start, nil
	}
	i, found := slices.BinarySearchFunc(c.batches, at, func(b copiedBatch, p eventstore.Position) int {
		switch {
		case b.src.Less(p):
			return -1
		case p.Less(b.src):
			return 1
		}
		return 0
	})
	if !found {
		if i == len(c.batches) {
			return eventstore.Position{}, fmt.Errorf("position %v is past the copied log (head %v): stop the service and copy again", at, c.head)
		}
		return eventstore.Position{}, fmt.Errorf("position %v is inside a transaction: let the runners catch up, stop the service and copy again", at)
	}
	return c.batches[i].dst, nil
}
