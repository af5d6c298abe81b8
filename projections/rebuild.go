package projections

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/escrowd/escrowd/eventstore"
)

// rebuildBatch is the number of events replayed per transaction. Small
// transactions keep the shadow tables' locks and the server's xmin (and so
// vacuum) from being held for the whole rebuild.
const rebuildBatch = 2000

// ErrRebuildRunning is returned by Rebuild when another rebuild of the same
// projector is in progress.
var ErrRebuildRunning = errors.New("projections: a rebuild of this projector is already running")

// ShadowSchema is the schema a rebuild of the projector named name fills.
func ShadowSchema(name string) string {
	var b strings.Builder
	b.WriteString("rebuild_")
	for _, c := range strings.ToLower(name) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// Rebuild is RebuildAll of the one projector p.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, store eventstore.Store, p Projector, log *zap.Logger, progress func(done, total int64)) error {
	return RebuildAll(ctx, pool, store, []Projector{p}, log, progress)
}

// rebuildPage is the number of events the shared reader of RebuildAll
// reads at a time; each projector writes the events of a page that
// concern it in transactions of at most rebuildBatch (a Filler: in one
// transaction). A variable for the tests.
var rebuildPage = 5000

// RebuildAll replays the whole log into fresh tables of every projector of
// ps while the live tables keep serving and the live runner keeps
// projecting. The log is read once: one reader hands each page to one
// writer per projector, and the writers run at once, each on its own
// connection, writing only the events its projector is interested in
// (Interested): applied in transactions of at most 2,000 events, or for a
// Filler folded in memory and each row written once (fill.go). Each
// fills the tables of p.Schema() in the schema ShadowSchema(p.Name()),
// without the indexes it can build afterwards. progress(done,
// total) is called after each page all writers have written (total is the
// size of the log at the start, raised if the replay passes it).
//
// Once the log is read, each writer builds the indexes it went without,
// analyzes its tables and swaps them in, in one transaction: lock the
// checkpoint row (pausing the live runner of that projector), apply the
// events still missing, drop the live tables, move the shadow tables into
// the live schema, set the checkpoint to the replay's position. The live
// runner then re-syncs from that checkpoint. A projector whose swap is
// done stays rebuilt when another fails.
//
// p.Schema() must create only tables and their indexes and constraints
// (those move with their table), and p.Tables() must name them all.
func RebuildAll(ctx context.Context, pool *pgxpool.Pool, store eventstore.Store, ps []Projector, log *zap.Logger, progress func(done, total int64)) error {
	if log == nil {
		log = zap.NewNop()
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	if err := checkNames(ps); err != nil {
		return err
	}
	if len(ps) == 0 {
		return nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// One session holds every projector's rebuild lock.
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, p := range ps {
			if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtext('rebuild:' || $1))`, p.Name()); err != nil {
				_ = conn.Conn().Close(uctx)
				break
			}
		}
		conn.Release()
	}()
	for _, p := range ps {
		var locked bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('rebuild:' || $1))`, p.Name()).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			// pg_advisory_unlock of a lock not held only warns.
			return fmt.Errorf("%w: %s", ErrRebuildRunning, p.Name())
		}
	}
	var live string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&live); err != nil {
		return err
	}

	start := time.Now()
	head, err := store.Head(ctx)
	if err != nil {
		return err
	}
	total, err := countEvents(ctx, store, eventstore.Start, head, 0)
	if err != nil {
		return err
	}
	ws := make([]*rebuildWriter, len(ps))
	for i, p := range ps {
		w := &rebuildWriter{p: p, pool: pool, store: store, live: live, shadow: ShadowSchema(p.Name())}
		if f, ok := p.(Filler); ok {
			w.fill = f.NewFill()
		}
		ws[i] = w
		if err := ensureCheckpoint(ctx, pool, p.Name()); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+w.qShadow()+` CASCADE`); err != nil {
			return err
		}
		// The shadow is useless after the swap (it is empty) and after a
		// failure (a new rebuild starts from scratch).
		defer w.dropShadow(log)
		if _, err := pool.Exec(ctx, `CREATE SCHEMA `+w.qShadow()); err != nil {
			return err
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, w.searchPath()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, p.Schema())
			return err
		}); err != nil {
			return fmt.Errorf("%s: shadow schema: %w", p.Name(), err)
		}
		if err := w.deferIndexes(ctx); err != nil {
			return fmt.Errorf("%s: shadow indexes: %w", p.Name(), err)
		}
		log.Info("projections: rebuild started", zap.String("projection", p.Name()), zap.Int64("events", total))
	}

	var (
		mu      sync.Mutex
		done    = make([]int64, len(ws))
		shown   int64
		reports = func(i int, n int64) {
			mu.Lock()
			defer mu.Unlock()
			done[i] = n
			least := slices.Min(done)
			if least > shown {
				shown = least
				total = max(total, shown)
				progress(shown, total)
			}
		}
	)
	progress(0, total)
	g, gctx := errgroup.WithContext(ctx)
	pages := make([]chan rebuildPageOf, len(ws))
	for i := range ws {
		pages[i] = make(chan rebuildPageOf, 2)
	}
	// The reader: the log once, page by page, to every writer. A writer
	// swaps only once the whole log is read (readAll).
	var readAll atomic.Bool
	g.Go(func() error {
		defer func() {
			for _, c := range pages {
				close(c)
			}
		}()
		pos := eventstore.Start
		var read int64
		for {
			events, err := store.ReadAll(gctx, pos, rebuildPage)
			if err != nil {
				return err
			}
			if len(events) > 0 {
				pos = events[len(events)-1].Position
			}
			read += int64(len(events))
			page := rebuildPageOf{events: events, end: pos, read: read}
			for _, c := range pages {
				select {
				case c <- page:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			if len(events) < rebuildPage {
				readAll.Store(true)
				return nil
			}
		}
	})
	for i, w := range ws {
		g.Go(func() error {
			for page := range pages[i] {
				if err := w.take(gctx, page); err != nil {
					return fmt.Errorf("rebuild %s: %w", w.p.Name(), err)
				}
				reports(i, page.read)
			}
			if !readAll.Load() {
				// The reader failed: its error is the group's.
				return nil
			}
			if w.fill != nil {
				if err := w.inShadow(gctx, w.fill.Finish); err != nil {
					return fmt.Errorf("rebuild %s: fill: %w", w.p.Name(), err)
				}
			}
			if err := w.createIndexes(gctx); err != nil {
				return fmt.Errorf("rebuild %s: indexes: %w", w.p.Name(), err)
			}
			if err := w.analyze(gctx); err != nil {
				return fmt.Errorf("rebuild %s: analyze: %w", w.p.Name(), err)
			}
			if err := w.swap(gctx, func(n int) {
				mu.Lock()
				defer mu.Unlock()
				shown += int64(n)
				total = max(total, shown)
				progress(shown, total)
			}); err != nil {
				return fmt.Errorf("rebuild %s: swap: %w", w.p.Name(), err)
			}
			log.Info("projections: rebuild done", zap.String("projection", w.p.Name()),
				zap.Stringer("checkpoint", w.pos), zap.Duration("took", time.Since(start)))
			return nil
		})
	}
	return g.Wait()
}

// rebuildPageOf is a page of the log as the reader of RebuildAll hands it
// out: its events, the position it ends at, the events read so far.
type rebuildPageOf struct {
	events []eventstore.RecordedEvent
	end    eventstore.Position
	read   int64
}

// rebuildWriter fills one projector's shadow tables.
type rebuildWriter struct {
	p            Projector
	pool         *pgxpool.Pool
	store        eventstore.Store
	live, shadow string
	// pending are events of the pages taken that concern p and are not
	// written yet; pos is where the written events end (every event up to
	// it is in the shadow, or does not concern p).
	pending []eventstore.RecordedEvent
	pos     eventstore.Position
	// indexes are the definitions of the shadow's indexes that the fill
	// goes without (deferIndexes).
	indexes []string
	// fill folds the log for a Filler (pending then stays empty).
	fill Fill
}

// deferIndexes drops the shadow tables' indexes that no constraint
// needs, keeping their definitions: one index built over the filled
// table costs a fraction of the same index kept up to date row by row.
// Those behind constraints stay, and for a projector that applies the
// log (not a Filler) the unique ones too: its upserts need them.
func (w *rebuildWriter) deferIndexes(ctx context.Context) error {
	rows, err := w.pool.Query(ctx, `SELECT c.relname, pg_get_indexdef(i.indexrelid)
		  FROM pg_index i
		  JOIN pg_class c ON c.oid = i.indexrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = $1 AND ($2 OR NOT i.indisunique) AND NOT i.indisprimary
		   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
		 ORDER BY c.relname`, w.shadow, w.fill != nil)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			rows.Close()
			return err
		}
		names, w.indexes = append(names, pgx.Identifier{w.shadow, name}.Sanitize()), append(w.indexes, def)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(names) == 0 {
		return err
	}
	_, err = w.pool.Exec(ctx, `DROP INDEX `+strings.Join(names, ", "))
	return err
}

// createIndexes builds the indexes deferIndexes dropped (the definitions
// name the shadow schema's tables).
func (w *rebuildWriter) createIndexes(ctx context.Context) error {
	for _, def := range w.indexes {
		if _, err := w.pool.Exec(ctx, def); err != nil {
			return err
		}
	}
	w.indexes = nil
	return nil
}

// analyze gathers the statistics of the shadow's tables: swapped in
// fresh, they would have none, and the listings would be planned blind
// until autovacuum reached them.
func (w *rebuildWriter) analyze(ctx context.Context) error {
	var tables []string
	for _, t := range w.p.Tables() {
		tables = append(tables, pgx.Identifier{w.shadow, t}.Sanitize())
	}
	if len(tables) == 0 {
		return nil
	}
	_, err := w.pool.Exec(ctx, `ANALYZE `+strings.Join(tables, ", "))
	return err
}

func (w *rebuildWriter) qShadow() string { return pgx.Identifier{w.shadow}.Sanitize() }

// searchPath makes unqualified names resolve to shadow tables first; the
// live schema stays visible for anything else a projector reads.
func (w *rebuildWriter) searchPath() string {
	return `SET LOCAL search_path TO ` + w.qShadow() + `, ` + pgx.Identifier{w.live}.Sanitize()
}

func (w *rebuildWriter) dropShadow(log *zap.Logger) {
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := w.pool.Exec(dctx, `DROP SCHEMA IF EXISTS `+w.qShadow()+` CASCADE`); err != nil {
		log.Warn("projections: cannot drop shadow schema", zap.String("schema", w.shadow), zap.Error(err))
	}
}

// relevant appends to dst the events of events that concern w's projector.
func (w *rebuildWriter) relevant(dst, events []eventstore.RecordedEvent) []eventstore.RecordedEvent {
	in, ok := w.p.(Interested)
	if !ok {
		return append(dst, events...)
	}
	prefixes := in.StreamPrefixes()
	for _, re := range events {
		for _, pre := range prefixes {
			if strings.HasPrefix(re.Stream, pre) {
				dst = append(dst, re)
				break
			}
		}
	}
	return dst
}

// inShadow runs f in a transaction on the shadow schema. Nothing in the
// shadow needs to survive a crash before the swap (a new rebuild starts
// from scratch), so its commits do not wait for the disk; the swap's
// does. The shadow's tables grow from empty and are not analyzed before
// the swap: a plan cached by a pooled connection while a table was small
// (a lookup by id that scans it) would stay for the whole rebuild and
// make a fill quadratic, so each statement is planned for the tables as
// they are.
func (w *rebuildWriter) inShadow(ctx context.Context, f func(context.Context, pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, w.searchPath()+`; SET LOCAL synchronous_commit TO off; SET LOCAL plan_cache_mode TO force_custom_plan`); err != nil {
			return err
		}
		return f(ctx, tx)
	})
}

// take hands the page's events for the projector to its fill, or queues
// them and writes them once there are rebuildBatch, or when the page is
// the last.
func (w *rebuildWriter) take(ctx context.Context, page rebuildPageOf) error {
	if w.fill != nil {
		if mine := w.relevant(nil, page.events); len(mine) > 0 {
			if err := w.inShadow(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.fill.Take(ctx, tx, mine) }); err != nil {
				return fmt.Errorf("fill: %w", err)
			}
		}
		w.pos = page.end
		return nil
	}
	w.pending = w.relevant(w.pending, page.events)
	last := len(page.events) < rebuildPage
	for len(w.pending) >= rebuildBatch || (last && len(w.pending) > 0) {
		n := min(len(w.pending), rebuildBatch)
		if err := w.inShadow(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.p.Apply(ctx, tx, w.pending[:n]) }); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		w.pending = append(w.pending[:0], w.pending[n:]...)
	}
	if len(w.pending) == 0 {
		w.pos = page.end
	}
	return nil
}

// swap applies what the log gained since the reader's last page and moves
// the shadow tables in, under the checkpoint row's lock (see RebuildAll);
// grew is told how many events the log gained.
func (w *rebuildWriter) swap(ctx context.Context, grew func(int)) error {
	if len(w.pending) > 0 {
		return fmt.Errorf("projections: %d events left unwritten", len(w.pending))
	}
	name := w.p.Name()
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		// Holding the checkpoint row lock pauses the live runner; the
		// events it still has to wait for are those committed since the
		// last page, which are few.
		stored, err := lockCheckpoint(ctx, tx, name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, w.searchPath()); err != nil {
			return err
		}
		for {
			events, err := w.store.ReadAll(ctx, w.pos, rebuildBatch)
			if err != nil {
				return err
			}
			if len(events) == 0 {
				break
			}
			grew(len(events))
			if mine := w.relevant(nil, events); len(mine) > 0 {
				if err := w.p.Apply(ctx, tx, mine); err != nil {
					return fmt.Errorf("apply: %w", err)
				}
			}
			w.pos = events[len(events)-1].Position
		}
		if w.pos.Less(stored) {
			// Cannot happen with a store whose ReadAll horizon only moves
			// forward; refuse rather than move the checkpoint backwards.
			return fmt.Errorf("projections: live checkpoint %s is ahead of the replay at %s", stored, w.pos)
		}
		var liveTables []string
		for _, t := range w.p.Tables() {
			liveTables = append(liveTables, pgx.Identifier{w.live, t}.Sanitize())
		}
		if len(liveTables) > 0 {
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+strings.Join(liveTables, ", ")); err != nil {
				return fmt.Errorf("drop live tables: %w", err)
			}
		}
		for _, t := range w.p.Tables() {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{w.shadow, t}.Sanitize()+` SET SCHEMA `+pgx.Identifier{w.live}.Sanitize()); err != nil {
				return fmt.Errorf("move table %s: %w", t, err)
			}
		}
		return storeCheckpoint(ctx, tx, name, w.pos)
	})
}
