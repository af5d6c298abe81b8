package wiring

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/sealing"
)

// Sealed is store behind the codec that seals events' personal and secret
// fields with the data keys of pool's keyring (table data_keys), wrapped by
// master; previous are earlier master keys still wrapping some. Every
// process builds its store through it, so nothing it appends reaches the
// log with those fields in plain text. The keyring is told the log is in
// its database only when store is the PostgreSQL store over pool itself.
func Sealed(store eventstore.Store, pool *pgxpool.Pool, master keyring.Master, previous ...keyring.Master) (eventstore.Store, *keyring.Keyring) {
	ring := keyring.New(pool, master, previous...)
	if pg, ok := store.(*postgres.Store); ok && pg.Pool() == pool {
		ring.SetLogInDatabase(true)
	}
	return sealing.Wrap(store, ring), ring
}

// Sealer is the sealer of the values kept outside the log, with the data
// keys of store's codec; nil when store has no codec (a test's store), so
// those values are kept as they are.
func Sealer(store eventstore.Store) domain.Sealer {
	if s, ok := store.(interface{ Sealer() domain.Sealer }); ok {
		return s.Sealer()
	}
	return nil
}
