package httpapi

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// Wiring is the process wiring (package internal/wiring) as this package's
// tests use it, so that they run the service cmd/escrowd runs. They cannot
// import it: it imports httpapi, and Go refuses an import cycle even in a
// test. wiring_ext_test.go, an external test file (package httpapi_test),
// may import both; it fills wired in before any test runs.
type Wiring struct {
	API              func(cfg Config, store eventstore.Store, pool *pgxpool.Pool, waiter Waiter, log *zap.Logger, reg *prometheus.Registry) *Server
	Subscriber       func(store eventstore.Store, pool *pgxpool.Pool) *webhooks.Subscriber
	SubscriberRunner func(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, sub *webhooks.Subscriber) (*projections.Runner, error)
	Endpoints        func(store eventstore.Store) webhooks.Endpoints
	Sealer           func(store eventstore.Store) domain.Sealer
	Deadlines        func(svc *app.Service, q *projections.Queries, log *zap.Logger) *app.DeadlineScheduler
	Sealed           func(store eventstore.Store, pool *pgxpool.Pool, master keyring.Master, previous ...keyring.Master) (eventstore.Store, *keyring.Keyring)
}

var wired Wiring

// SetWiring is called by wiring_ext_test.go's init.
func SetWiring(w Wiring) { wired = w }

// subscriberRunner is the webhook subscriber with its own runner, as a
// process running the webhooks role has it.
func subscriberRunner(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool) (*projections.Runner, error) {
	return wired.SubscriberRunner(ctx, store, pool, zap.NewNop(), wired.Subscriber(store, pool))
}
