package keyring

// Making data keys in groups. Creating customers makes a data key each, and
// storing one alone costs a statement and a commit of its own beside the
// event append. One insert runs at a time per keyring; keys asked for
// while it runs wait, and the first insert to finish sends all of them as
// one statement: one round trip and one WAL flush for the group. An idle
// keyring stores a key at once, alone.

import (
	"context"
	"crypto/rand"
	"sync"
	"time"
)

const (
	// maxMakeGroup bounds the keys of one insert.
	maxMakeGroup = 256
	// makeGroupTimeout bounds an insert that serves waiting keys: their
	// callers' contexts no longer apply once their keys are in it.
	makeGroupTimeout = 30 * time.Second
)

type makeReq struct {
	subject Subject
	raw     []byte
	wrapped []byte
	made    bool
	err     error
	done    chan struct{}
}

type makeGroup struct {
	mu      sync.Mutex
	running bool
	queue   []*makeReq
}

// make stores a new data key for s unless s has one (made reports which).
func (k *Keyring) make(ctx context.Context, s Subject) (raw []byte, made bool, err error) {
	raw = make([]byte, keySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, err
	}
	r := &makeReq{subject: s, raw: raw, wrapped: k.current.wrap(string(s), raw)}
	g := &k.makes
	g.mu.Lock()
	if !g.running {
		g.running = true
		g.mu.Unlock()
		k.insertKeys(ctx, []*makeReq{r})
		k.nextMakes()
		return r.result()
	}
	r.done = make(chan struct{})
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.result()
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, q := range g.queue {
		if q == r {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			g.mu.Unlock()
			return nil, false, ctx.Err()
		}
	}
	g.mu.Unlock()
	// Already in an insert: its outcome is decided there.
	<-r.done
	return r.result()
}

func (r *makeReq) result() ([]byte, bool, error) {
	if r.err != nil || !r.made {
		return nil, false, r.err
	}
	return r.raw, true, nil
}

// nextMakes is called when an insert has finished: it sends the keys asked
// for meanwhile as the next insert, or lets the next key go alone.
func (k *Keyring) nextMakes() {
	g := &k.makes
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.running = false
		g.mu.Unlock()
		return
	}
	n := min(len(g.queue), maxMakeGroup)
	batch := append([]*makeReq(nil), g.queue[:n]...)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	g.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), makeGroupTimeout)
		defer cancel()
		k.insertKeys(ctx, batch)
		for _, r := range batch {
			close(r.done)
		}
		k.nextMakes()
	}()
}

const (
	insertKeysSQL = `INSERT INTO data_keys (subject, wrapped, master_id)
		SELECT s, w, $3 FROM unnest($1::text[], $2::bytea[]) AS t(s, w)
		ON CONFLICT (subject) DO NOTHING RETURNING subject`
	// insertKeysUnflushedSQL commits without waiting for the WAL flush
	// (synchronous_commit off for its own transaction only), when the
	// log's commits flush the keys (SetLogInDatabase).
	insertKeysUnflushedSQL = `WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
		INSERT INTO data_keys (subject, wrapped, master_id)
		SELECT s, w, $3 FROM unnest($1::text[], $2::bytea[]) AS t(s, w), unflushed
		ON CONFLICT (subject) DO NOTHING RETURNING subject`
)

// insertKeys stores the keys of reqs in one statement, each unless its
// subject has one: made is set on the requests whose key was stored. Of
// two requests for one subject, only the first is tried; the other reads
// the key made.
func (k *Keyring) insertKeys(ctx context.Context, reqs []*makeReq) {
	subjects := make([]string, 0, len(reqs))
	wrapped := make([][]byte, 0, len(reqs))
	first := make(map[Subject]*makeReq, len(reqs))
	for _, r := range reqs {
		if _, dup := first[r.subject]; dup {
			continue
		}
		first[r.subject] = r
		subjects = append(subjects, string(r.subject))
		wrapped = append(wrapped, r.wrapped)
	}
	insert := insertKeysSQL
	if k.logHere.Load() {
		insert = insertKeysUnflushedSQL
	}
	rows, err := k.pool.Query(ctx, insert, subjects, wrapped, k.current.id)
	if err == nil {
		for rows.Next() {
			var s string
			if err = rows.Scan(&s); err != nil {
				break
			}
			if r := first[Subject(s)]; r != nil {
				r.made = true
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		for _, r := range reqs {
			r.made, r.err = false, err
		}
	}
}
