package keyring

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escrowd/escrowd/internal/pgtest"
)

func newMaster(t *testing.T) Master {
	t.Helper()
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	m, err := NewMaster(key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSealOpensOnlyForItsSubjectAndAAD(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	k := New(pool, newMaster(t))
	ada, bola := Customer("c_ada"), Customer("c_bola")
	sealed, err := k.Seal(ctx, ada, []byte("22212345678"), []byte("bvn"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("22212345678")) {
		t.Fatal("the sealed value holds the plaintext")
	}
	again, _ := k.Seal(ctx, ada, []byte("22212345678"), []byte("bvn"))
	if bytes.Equal(sealed, again) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	got, err := New(pool, k.current).Open(ctx, ada, sealed, []byte("bvn")) // another process
	if err != nil || string(got) != "22212345678" {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := k.Seal(ctx, bola, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() ([]byte, error){
		"other field":   func() ([]byte, error) { return k.Open(ctx, ada, sealed, []byte("phone")) },
		"other subject": func() ([]byte, error) { return k.Open(ctx, bola, sealed, []byte("bvn")) },
		"altered": func() ([]byte, error) {
			b := bytes.Clone(sealed)
			b[len(b)-1] ^= 1
			return k.Open(ctx, ada, b, []byte("bvn"))
		},
	} {
		if _, err := open(); err == nil {
			t.Fatalf("%s: opened", name)
		}
	}
	if _, err := k.Open(ctx, Customer("c_never"), sealed, nil); !errors.Is(err, ErrNoKey) {
		t.Fatalf("a subject without a key: %v", err)
	}
	var wrapped []byte
	if err := pool.QueryRow(ctx, `SELECT wrapped FROM data_keys WHERE subject = 'customer:c_ada'`).Scan(&wrapped); err != nil || len(wrapped) != 12+keySize+16 {
		t.Fatalf("stored key %d bytes, %v", len(wrapped), err)
	}
}

// TestDestroyErases: once a subject's key is destroyed nothing sealed with
// it opens, in this process or a fresh one, nothing more is sealed for it,
// and the stored row keeps no key.
func TestDestroyErases(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := newMaster(t)
	k := New(pool, m)
	ada := Customer("c_ada")
	sealed, err := k.Seal(ctx, ada, []byte("ada@example.com"), []byte("email"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(ctx, ada, sealed, []byte("email")); err != nil { // cached now
		t.Fatal(err)
	}
	other := New(pool, m)
	if _, err := other.Open(ctx, ada, sealed, []byte("email")); err != nil {
		t.Fatal(err)
	}
	if did, err := k.Destroy(ctx, ada); err != nil || !did {
		t.Fatalf("destroy: %v %v", did, err)
	}
	if did, err := k.Destroy(ctx, ada); err != nil || did {
		t.Fatalf("destroy again: %v %v", did, err)
	}
	for name, kr := range map[string]*Keyring{"this process": k, "a fresh process": New(pool, m)} {
		if _, err := kr.Open(ctx, ada, sealed, []byte("email")); !errors.Is(err, ErrErased) {
			t.Fatalf("%s opens after the destruction: %v", name, err)
		}
		if _, err := kr.Seal(ctx, ada, []byte("new"), nil); !errors.Is(err, ErrErased) {
			t.Fatalf("%s seals after the destruction: %v", name, err)
		}
	}
	if d, err := k.Destroyed(ctx, ada); err != nil || !d {
		t.Fatalf("destroyed %v %v", d, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM data_keys WHERE wrapped IS NOT NULL AND subject = 'customer:c_ada'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a destroyed key is still stored: %d %v", n, err)
	}
	// A subject destroyed before anything was sealed never gets a key.
	if _, err := k.Destroy(ctx, Customer("c_early")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(pool, m).Seal(ctx, Customer("c_early"), []byte("x"), nil); !errors.Is(err, ErrErased) {
		t.Fatalf("sealed for a subject destroyed first: %v", err)
	}
	if _, err := k.Destroy(ctx, blindIndexSubject); err == nil {
		t.Fatal("the blind-index key was destroyed")
	}
}

// TestRotateMasterRewrapsWithoutTouchingSealedData: after a rotation every
// key is wrapped by the new master only, and what was sealed before opens
// with the new master alone; blind indexes stay the same.
func TestRotateMasterRewrapsWithoutTouchingSealedData(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	oldM, newM := newMaster(t), newMaster(t)
	before := New(pool, oldM)
	sealed := map[Subject][]byte{}
	for _, s := range []Subject{Customer("c_1"), Customer("c_2"), Merchant("m_1")} {
		b, err := before.Seal(ctx, s, []byte("value of "+string(s)), []byte("f"))
		if err != nil {
			t.Fatal(err)
		}
		sealed[s] = b
	}
	idx, err := before.BlindIndex(ctx, "email", "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := before.Destroy(ctx, Customer("c_gone")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(pool, newM).RotateMaster(ctx); err == nil || !strings.Contains(err.Error(), oldM.ID()) {
		t.Fatalf("rotation without the old master: %v", err)
	}
	n, err := New(pool, newM, oldM).RotateMaster(ctx)
	if err != nil || n != 4 { // three subjects and the blind-index key
		t.Fatalf("re-wrapped %d, %v", n, err)
	}
	if n, err := New(pool, newM, oldM).RotateMaster(ctx); err != nil || n != 0 {
		t.Fatalf("a second rotation re-wrapped %d, %v", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM data_keys WHERE wrapped IS NOT NULL AND master_id <> $1`, newM.ID()).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d keys not re-wrapped: %v", left, err)
	}
	after := New(pool, newM)
	for s, b := range sealed {
		got, err := after.Open(ctx, s, b, []byte("f"))
		if err != nil || string(got) != "value of "+string(s) {
			t.Fatalf("%s after the rotation: %q %v", s, got, err)
		}
	}
	if got, err := after.BlindIndex(ctx, "email", "ada@example.com"); err != nil || got != idx {
		t.Fatalf("blind index changed with the master: %s %v", got, err)
	}
	if _, err := New(pool, oldM).Open(ctx, Customer("c_1"), sealed[Customer("c_1")], []byte("f")); err == nil {
		t.Fatal("the old master still opens a re-wrapped key")
	}
}

func TestBlindIndex(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := newMaster(t)
	index := func(purpose, value string) string {
		t.Helper()
		v, err := New(pool, m).BlindIndex(ctx, purpose, value)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b := index("email", "ada@example.com"), index("email", "ada@example.com")
	c, d := index("phone", "ada@example.com"), index("email", "bola@example.com")
	// An index is hex: it may hold "ada" by chance, never the value.
	if a == "" || a != b || a == c || a == d || strings.Contains(a, "ada@example.com") || len(a) != 64 {
		t.Fatalf("indexes %s %s %s %s", a, b, c, d)
	}
	// One keyring, asked again and again, at once too, answers the same.
	k := New(pool, m)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 50 {
				value, want := "ada@example.com", a
				if i%2 == 1 {
					value, want = "bola@example.com", d
				}
				if got, err := k.BlindIndex(ctx, "email", value); err != nil || got != want {
					t.Errorf("index of %s %s (%v), want %s", value, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestFirstSealsRaceToOneKey: processes sealing a subject's first values at
// once agree on one data key.
func TestFirstSealsRaceToOneKey(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := newMaster(t)
	var wg sync.WaitGroup
	sealed := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range sealed {
		wg.Go(func() { sealed[i], errs[i] = New(pool, m).Seal(ctx, Merchant("m_race"), []byte("secret"), nil) })
	}
	wg.Wait()
	reader := New(pool, m)
	for i, b := range sealed {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got, err := reader.Open(ctx, Merchant("m_race"), b, nil); err != nil || string(got) != "secret" {
			t.Fatalf("seal %d does not open: %v", i, err)
		}
	}
}

func TestMasterFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "master.key")
	if err := CreateMasterFile(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("master key file mode %v %v", fi.Mode(), err)
	}
	m, err := LoadMaster(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadMaster(path)
	if err != nil || again.ID() != m.ID() || len(m.ID()) != 16 {
		t.Fatalf("ids %s %s %v", m.ID(), again.ID(), err)
	}
	if err := CreateMasterFile(path); err == nil {
		t.Fatal("an existing master key file was replaced")
	}
	short := filepath.Join(t.TempDir(), "short.key")
	os.WriteFile(short, []byte("c2hvcnQ=\n"), 0o600)
	if _, err := LoadMaster(short); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("short key: %v", err)
	}
	junk := filepath.Join(t.TempDir(), "junk.key")
	os.WriteFile(junk, []byte("not base64!!"), 0o600)
	if _, err := LoadMaster(junk); err == nil || !strings.Contains(err.Error(), "base64") {
		t.Fatalf("junk key: %v", err)
	}
}

// TestKeysMadeTogetherOpen: keys asked for while an insert runs go
// together in the next one, two asks for one subject among them included,
// and every value sealed then opens in another process.
func TestKeysMadeTogetherOpen(t *testing.T) {
	t.Run("flushed", func(t *testing.T) { testKeysMadeTogetherOpen(t, false) })
	t.Run("log in the database", func(t *testing.T) { testKeysMadeTogetherOpen(t, true) })
}

func testKeysMadeTogetherOpen(t *testing.T, logHere bool) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := newMaster(t)
	k := New(pool, m)
	k.SetLogInDatabase(logHere)
	if _, err := k.Seal(ctx, Customer("c_warm"), []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	// Hold inserts back until the others have queued behind the first.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE data_keys IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	subjects := []Subject{Customer("c_first"), Customer("c_a"), Customer("c_b"), Customer("c_a"), Customer("c_b"), Customer("c_c")}
	sealed := make([][]byte, len(subjects))
	errs := make([]error, len(subjects))
	var wg sync.WaitGroup
	seal := func(i int) {
		wg.Go(func() { sealed[i], errs[i] = k.Seal(ctx, subjects[i], []byte("value"), nil) })
	}
	seal(0)
	waitFor(t, func() bool { k.makes.mu.Lock(); defer k.makes.mu.Unlock(); return k.makes.running })
	for i := 1; i < len(subjects); i++ {
		seal(i)
	}
	waitFor(t, func() bool {
		k.makes.mu.Lock()
		defer k.makes.mu.Unlock()
		return len(k.makes.queue) == len(subjects)-1
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	reader := New(pool, m)
	for i, b := range sealed {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got, err := reader.Open(ctx, subjects[i], b, nil); err != nil || string(got) != "value" {
			t.Fatalf("seal %d (%s) does not open in another process: %v", i, subjects[i], err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM data_keys WHERE subject LIKE 'customer:c\_%'`).Scan(&n); err != nil || n != 5 {
		t.Fatalf("%d data keys stored (%v), want 5", n, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not reached in 5 s")
}

// TestKeysWaitForTheirFlushUnlessTheLogIsHere: a keyring not told the log
// is in its database (the log in KurrentDB) stores each new key durably
// before using it: once the seal returns, the WAL is flushed past where it
// ended before the key was made.
func TestKeysWaitForTheirFlushUnlessTheLogIsHere(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var fsync string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync')`).Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	if fsync != "on" {
		t.Skip("the server does not flush its WAL (fsync off)")
	}
	k := New(pool, newMaster(t))
	for i := range 5 {
		var before, flushed string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := k.Seal(ctx, Customer(fmt.Sprintf("c_flushed_%d", i)), []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		var past bool
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() > $1::pg_lsn, pg_current_wal_flush_lsn()::text`, before).Scan(&past, &flushed); err != nil {
			t.Fatal(err)
		}
		if !past {
			t.Fatalf("key %d: the WAL is flushed to %s, not past %s where it ended before the key was made", i, flushed, before)
		}
	}
}

// TestForgetStopsOpeningAtOnce: a process that holds a subject's key in
// its cache opens nothing more of the subject's once it forgets it (it
// read the erasure), though the key is still stored; it counts as a
// destruction for the caches of opened data, and survives the key cache
// starting over. Other subjects are untouched.
func TestForgetStopsOpeningAtOnce(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	k := New(pool, newMaster(t))
	ada, bola := Customer("c_ada"), Customer("c_bola")
	sealed, err := k.Seal(ctx, ada, []byte("ada@example.com"), []byte("email"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := k.Seal(ctx, bola, []byte("bola@example.com"), []byte("email"))
	if err != nil {
		t.Fatal(err)
	}
	before := k.Destroys()
	k.Forget(ada)
	if k.Destroys() == before {
		t.Fatal("forgetting did not move Destroys")
	}
	check := func(when string) {
		t.Helper()
		if _, err := k.Open(ctx, ada, sealed, []byte("email")); !errors.Is(err, ErrErased) {
			t.Fatalf("%s: opens a forgotten subject's data: %v", when, err)
		}
		if _, err := k.Seal(ctx, ada, []byte("new"), nil); !errors.Is(err, ErrErased) {
			t.Fatalf("%s: seals for a forgotten subject: %v", when, err)
		}
		if got, err := k.Open(ctx, bola, other, []byte("email")); err != nil || string(got) != "bola@example.com" {
			t.Fatalf("%s: another subject: %q %v", when, got, err)
		}
	}
	check("forgotten")
	n := k.Destroys()
	k.Forget(ada)
	if k.Destroys() != n {
		t.Fatal("forgetting a forgotten subject again moved Destroys (every cache of opened data starts over)")
	}
	if d, err := k.Destroyed(ctx, ada); err != nil || d {
		t.Fatalf("the key is to be destroyed by its own command, not by Forget: %v %v", d, err)
	}
	k.mu.Lock()
	clear(k.cache) // as when the cache is full
	k.mu.Unlock()
	check("after the cache started over")
}

// TestPrepareDestroyStopsCaching: once a key is marked for destruction,
// another process opens with it but keeps it no longer, so the destruction
// counts there at once instead of when a cached key expires; a subject
// marked before it has a key gets none.
func TestPrepareDestroyStopsCaching(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	m := newMaster(t)
	k := New(pool, m)
	ada := Customer("c_ada")
	sealed, err := k.Seal(ctx, ada, []byte("ada@example.com"), []byte("email"))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.PrepareDestroy(ctx, ada); err != nil {
		t.Fatal(err)
	}
	if err := k.PrepareDestroy(ctx, ada); err != nil {
		t.Fatalf("marked again: %v", err)
	}
	// A process that starts now, before the destruction.
	late := New(pool, m)
	for _, kr := range []*Keyring{k, late} {
		if got, err := kr.Open(ctx, ada, sealed, []byte("email")); err != nil || string(got) != "ada@example.com" {
			t.Fatalf("a marked key no longer opens: %q %v", got, err)
		}
	}
	if d, err := k.Destroyed(ctx, ada); err != nil || d {
		t.Fatalf("marking destroyed the key: %v %v", d, err)
	}
	if _, err := k.Destroy(ctx, ada); err != nil {
		t.Fatal(err)
	}
	if _, err := late.Open(ctx, ada, sealed, []byte("email")); !errors.Is(err, ErrErased) {
		t.Fatalf("a process that opened with the marked key still opens after its destruction: %v", err)
	}
	early := Customer("c_early")
	if err := k.PrepareDestroy(ctx, early); err != nil {
		t.Fatal(err)
	}
	if _, err := New(pool, m).Seal(ctx, early, []byte("x"), nil); !errors.Is(err, ErrErased) {
		t.Fatalf("sealed for a subject marked before it had a key: %v", err)
	}
	if err := k.PrepareDestroy(ctx, blindIndexSubject); err == nil {
		t.Fatal("the blind-index key was marked for destruction")
	}
}
