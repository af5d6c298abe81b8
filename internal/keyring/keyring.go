package keyring

import (
	"context"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Subject is whose data a data key seals.
type Subject string

// Customer and Merchant are the subjects of a customer's and a merchant's
// data.
func Customer(id string) Subject { return Subject("customer:" + id) }
func Merchant(id string) Subject { return Subject("merchant:" + id) }

// blindIndexSubject holds the key of the blind indexes: one for the whole
// service, never destroyed, so an index stays the same across master keys.
const blindIndexSubject Subject = "blind-index"

// ErrErased is the answer for a subject whose data key was destroyed.
var ErrErased = errors.New("keyring: the data was erased (its key was destroyed)")

// ErrNoKey is the answer for a subject that never had anything sealed.
var ErrNoKey = errors.New("keyring: the subject has no data key")

// Cache bounds: an unwrapped data key is kept at most cacheTTL, which
// bounds how long a process that holds it goes on opening a subject's data
// after another process destroyed its key; at most cacheMax are kept.
const (
	cacheTTL = time.Minute
	cacheMax = 100_000
)

// Keyring seals and opens subjects' data with their data keys (table
// data_keys), wrapped by the current master key; keys wrapped by a
// previous master still open, until RotateMaster re-wraps them.
type Keyring struct {
	pool     *pgxpool.Pool
	current  Master
	previous map[string]Master
	now      func() time.Time

	mu    sync.Mutex
	cache map[Subject]cachedKey
	// gone are the subjects this process knows erased (Destroy, Forget):
	// kept apart from the cache, which starts over when full, since a
	// forgotten subject's key may still be stored for a moment.
	gone  map[Subject]struct{}
	blind *sync.Pool // of HMACs keyed with the blind-index key
	// destroyed counts the keys this process destroyed (Destroys).
	destroyed atomic.Uint64
	makes     makeGroup
	// logHere: the event log is kept in the keyring's database (see
	// SetLogInDatabase).
	logHere atomic.Bool
}

// cachedKey is an unwrapped key, or (aead nil) a destroyed one: a
// destruction is for good, so it is kept until the cache starts over.
type cachedKey struct {
	aead    cipher.AEAD
	expires time.Time
}

// New is the keyring over pool's data_keys, wrapping new keys with
// current; previous are earlier master keys whose wrapped keys still open.
func New(pool *pgxpool.Pool, current Master, previous ...Master) *Keyring {
	k := &Keyring{pool: pool, current: current, previous: map[string]Master{}, now: time.Now, cache: map[Subject]cachedKey{}, gone: map[Subject]struct{}{}}
	for _, m := range previous {
		if m.id != current.id {
			k.previous[m.id] = m
		}
	}
	return k
}

// SetLogInDatabase tells the keyring whether the event log is kept in its
// own database. Then every value sealed with a data key that must outlive
// a crash (an event, a read model's row, an outbox body, a kept answer)
// commits in that database after the key was stored, and PostgreSQL makes
// a commit durable only with everything its write-ahead log holds before
// it; so a new key's insert does not wait for its own flush: the first
// commit that keeps something sealed with it flushes it too, and a crash
// before that loses the key with everything that used it. With the log
// elsewhere (KurrentDB), an event could outlive its key: each insert
// waits for its flush.
func (k *Keyring) SetLogInDatabase(here bool) { k.logHere.Store(here) }

// LogInDatabase is what SetLogInDatabase set.
func (k *Keyring) LogInDatabase() bool { return k.logHere.Load() }

// Seal encrypts plaintext under s's data key, made on first use, bound to
// aad (what the value is: a field's name, say), so a sealed value moved to
// another field or subject does not open.
func (k *Keyring) Seal(ctx context.Context, s Subject, plaintext, aad []byte) ([]byte, error) {
	aead, err := k.key(ctx, s, true)
	if err != nil {
		return nil, err
	}
	return seal(aead, plaintext, sealAAD(s, aad)), nil
}

// Open decrypts what Seal sealed for s with aad: ErrErased once s's key is
// destroyed.
func (k *Keyring) Open(ctx context.Context, s Subject, sealed, aad []byte) ([]byte, error) {
	aead, err := k.key(ctx, s, false)
	if err != nil {
		return nil, err
	}
	return open(aead, sealed, sealAAD(s, aad))
}

func sealAAD(s Subject, aad []byte) []byte {
	return append([]byte("escrowd sealed\x00"+string(s)+"\x00"), aad...)
}

// Destroy destroys s's data key for good: nothing sealed with it opens
// again, in this process at once, and in others as soon as they read the
// erasure from the log (Forget) or at the latest within the cache's TTL. A
// subject without a key gets a destroyed one, so none is made later. It
// reports whether a key was destroyed now (false: it already was).
func (k *Keyring) Destroy(ctx context.Context, s Subject) (bool, error) {
	if s == blindIndexSubject {
		return false, errors.New("keyring: the blind-index key is not destroyed")
	}
	tag, err := k.pool.Exec(ctx, `INSERT INTO data_keys (subject, wrapped, master_id, destroyed_at) VALUES ($1, NULL, $2, now())
		ON CONFLICT (subject) DO UPDATE SET wrapped = NULL, destroyed_at = now() WHERE data_keys.wrapped IS NOT NULL`, string(s), k.current.id)
	if err != nil {
		return false, err
	}
	k.Forget(s)
	return tag.RowsAffected() > 0, nil
}

// PrepareDestroy marks s's data key as about to be destroyed: it stays
// stored and opens as before, but from now on no process keeps it in its
// cache, each opening reading it again, so the Destroy that follows counts
// in every process at once. Erasing a subject runs it before recording the
// erasure: a process that starts between the record and the destruction
// reads the log from after the record and cannot learn of it there, and
// without the mark it could keep the key for the cache's TTL. A subject
// without a key gets a destroyed one, as with Destroy: there is nothing to
// open, and none is made meanwhile.
func (k *Keyring) PrepareDestroy(ctx context.Context, s Subject) error {
	if s == blindIndexSubject {
		return errors.New("keyring: the blind-index key is not destroyed")
	}
	_, err := k.pool.Exec(ctx, `INSERT INTO data_keys (subject, wrapped, master_id, destroyed_at) VALUES ($1, NULL, $2, now())
		ON CONFLICT (subject) DO UPDATE SET destroying_since = coalesce(data_keys.destroying_since, now()) WHERE data_keys.wrapped IS NOT NULL`, string(s), k.current.id)
	if err == nil {
		k.mu.Lock()
		delete(k.cache, s)
		k.mu.Unlock()
	}
	return err
}

// Forget makes s's data unreadable in this process at once and for good,
// whatever its keys cache: s's erasure is on record, and the process
// destroying its key may not have done so yet (it records the erasure
// first). A process that reads the erasure from the log calls it, so it
// stops opening s's data as soon as it reads the record, not when its
// cached key expires.
func (k *Keyring) Forget(s Subject) {
	if s == blindIndexSubject {
		return
	}
	k.mu.Lock()
	_, already := k.gone[s]
	k.gone[s] = struct{}{}
	delete(k.cache, s)
	k.mu.Unlock()
	if !already {
		// Told again (a process running two roles reads the erasure
		// twice; a destruction follows its record): the caches of opened
		// data dropped it the first time.
		k.destroyed.Add(1)
	}
}

// Destroys counts the data keys this process destroyed or forgot: what a
// cache of opened data compares to drop what it opened before.
func (k *Keyring) Destroys() uint64 { return k.destroyed.Load() }

// CacheTTL is how long a process may go on opening a subject's data after
// another process destroyed its key (a cache of opened data keeps what it
// opened no longer).
const CacheTTL = cacheTTL

// Destroyed reports whether s's data key was destroyed.
func (k *Keyring) Destroyed(ctx context.Context, s Subject) (bool, error) {
	var destroyed bool
	err := k.pool.QueryRow(ctx, `SELECT wrapped IS NULL FROM data_keys WHERE subject = $1`, string(s)).Scan(&destroyed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return destroyed, err
}

// key is s's data key as an AEAD, made when create is set and s has none.
func (k *Keyring) key(ctx context.Context, s Subject, create bool) (cipher.AEAD, error) {
	now := k.now()
	k.mu.Lock()
	if _, ok := k.gone[s]; ok {
		k.mu.Unlock()
		return nil, ErrErased
	}
	if c, ok := k.cache[s]; ok && c.aead == nil {
		k.mu.Unlock()
		return nil, ErrErased
	} else if ok && now.Before(c.expires) {
		k.mu.Unlock()
		return c.aead, nil
	}
	k.mu.Unlock()
	raw, destroying, err := k.load(ctx, s, create)
	if errors.Is(err, ErrErased) {
		k.remember(s, cachedKey{})
	}
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(raw)
	if err != nil {
		return nil, err
	}
	if !destroying {
		k.remember(s, cachedKey{aead: aead, expires: now.Add(cacheTTL)})
	}
	return aead, nil
}

func (k *Keyring) remember(s Subject, c cachedKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cache) >= cacheMax {
		clear(k.cache)
	}
	k.cache[s] = c
}

// load reads and unwraps s's data key, making one first when create is
// set and s has none, and reports whether it is about to be destroyed
// (PrepareDestroy: not to be cached). Two processes making one at once
// agree on the first stored.
func (k *Keyring) load(ctx context.Context, s Subject, create bool) (raw []byte, destroying bool, err error) {
	if create && s != blindIndexSubject {
		// Sealing mostly makes a new subject's key (a customer being
		// created): try the insert first, one round trip instead of two.
		raw, made, err := k.make(ctx, s)
		if err != nil || made {
			return raw, false, err
		}
	}
	for range 3 {
		var (
			wrapped  []byte
			masterID string
		)
		err := k.pool.QueryRow(ctx, `SELECT wrapped, master_id, destroying_since IS NOT NULL FROM data_keys WHERE subject = $1`, string(s)).
			Scan(&wrapped, &masterID, &destroying)
		switch {
		case err == nil && wrapped == nil:
			return nil, false, ErrErased
		case err == nil:
			raw, err := k.unwrap(s, wrapped, masterID)
			return raw, destroying, err
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, false, err
		case !create:
			return nil, false, ErrNoKey
		}
		raw, made, err := k.make(ctx, s)
		if err != nil || made {
			return raw, false, err
		}
		// Another process made it first: read theirs.
	}
	return nil, false, fmt.Errorf("keyring: the data key of %s could not be read or made", s)
}

func (k *Keyring) unwrap(s Subject, wrapped []byte, masterID string) ([]byte, error) {
	m := k.current
	if masterID != m.id {
		var ok bool
		if m, ok = k.previous[masterID]; !ok {
			return nil, fmt.Errorf("keyring: the data key of %s is wrapped by master key %s, which this process does not have", s, masterID)
		}
	}
	return m.unwrap(string(s), wrapped)
}

// RotateMaster re-wraps every data key wrapped by a previous master with
// the current one, in batches, each in a transaction of its own; nothing
// sealed is touched. Keys wrapped by a master this keyring lacks are an
// error (naming it) after the others are re-wrapped. It returns how many
// keys it re-wrapped.
func (k *Keyring) RotateMaster(ctx context.Context) (int, error) {
	const batch = 500
	total := 0
	after := ""
	var unknown error
	for {
		n, last, err := k.rewrapBatch(ctx, after, batch, &unknown)
		total += n
		if err != nil {
			return total, err
		}
		if last == "" {
			return total, unknown
		}
		after = last
	}
}

func (k *Keyring) rewrapBatch(ctx context.Context, after string, limit int, unknown *error) (n int, last string, err error) {
	err = pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT subject, wrapped, master_id FROM data_keys
			WHERE wrapped IS NOT NULL AND master_id <> $1 AND subject > $2 ORDER BY subject LIMIT $3 FOR UPDATE`, k.current.id, after, limit)
		if err != nil {
			return err
		}
		type row struct {
			subject, master string
			wrapped         []byte
		}
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.subject, &x.wrapped, &x.master)
		})
		if err != nil {
			return err
		}
		for _, x := range found {
			last = x.subject
			raw, err := k.unwrap(Subject(x.subject), x.wrapped, x.master)
			if err != nil {
				*unknown = err
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE data_keys SET wrapped = $2, master_id = $3 WHERE subject = $1`,
				x.subject, k.current.wrap(x.subject, raw), k.current.id); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	return n, last, nil
}

// BlindIndex is a keyed hash of value for purpose ("email", "phone",
// "recipient", "account"): equal values of one purpose have equal indexes,
// so a read model or a stream name can stand for a value without holding
// it; without the key the index tells nothing about the value. Callers
// normalise values first (an email's case).
func (k *Keyring) BlindIndex(ctx context.Context, purpose, value string) (string, error) {
	k.mu.Lock()
	macs := k.blind
	k.mu.Unlock()
	if macs == nil {
		raw, _, err := k.load(ctx, blindIndexSubject, true)
		if err != nil {
			return "", err
		}
		// Keying an HMAC costs more than hashing a short value: keyed
		// ones are kept for reuse (Reset returns one to its keyed state).
		macs = &sync.Pool{New: func() any { return hmac.New(sha256.New, raw) }}
		k.mu.Lock()
		if k.blind == nil {
			k.blind = macs
		}
		macs = k.blind
		k.mu.Unlock()
	}
	mac := macs.Get().(hash.Hash)
	defer macs.Put(mac)
	mac.Reset()
	mac.Write([]byte(purpose))
	mac.Write([]byte{0})
	mac.Write([]byte(value))
	return hex.EncodeToString(mac.Sum(nil)), nil
}
