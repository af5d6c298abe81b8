package wiring_test

import (
	"testing"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/escrowd/escrowd/internal/wiring"
)

// otherStore stands for a log kept elsewhere (the KurrentDB adapter).
type otherStore struct{ eventstore.Store }

// TestKeysWaitForTheirFlushUnlessTheLogIsInTheirDatabase: a new data key's
// insert may leave its flush to the log's next commit only when that
// commit is in the keyring's own database.
func TestKeysWaitForTheirFlushUnlessTheLogIsInTheirDatabase(t *testing.T) {
	pool, other := pgtest.NewPool(t), pgtest.NewPool(t)
	master, err := keyring.GenerateMaster()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		store eventstore.Store
		here  bool
	}{
		{"the PostgreSQL store over the keyring's pool", postgres.New(pool), true},
		{"the PostgreSQL store over another database", postgres.New(other), false},
		{"a log elsewhere", otherStore{postgres.New(pool)}, false},
	} {
		sealed, ring := wiring.Sealed(c.store, pool, master)
		t.Cleanup(sealed.Close)
		if ring.LogInDatabase() != c.here {
			t.Errorf("%s: log in the keyring's database %v, want %v", c.name, ring.LogInDatabase(), c.here)
		}
	}
}
