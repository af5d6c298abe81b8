package httpapi

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// aggregateCacheSize bounds the command engine's aggregate cache.
const aggregateCacheSize = 100_000

// NewStack assembles the API over an event store and its PostgreSQL pool
// (read models, rate limits, idempotency keys): the one wiring the server,
// the tests and the benchmarks share. reg may be nil.
func NewStack(cfg Config, store eventstore.Store, pool *pgxpool.Pool, waiter Waiter, log *zap.Logger, reg *prometheus.Registry) *Server {
	q := projections.NewQueries(pool)
	engine := app.NewEngine(store, aggregateCacheSize)
	svc := app.NewService(engine)
	for env, addr := range cfg.BSCMasterAddress {
		if addr != "" {
			svc.CryptoMaster[env] = addr
		}
	}
	return New(cfg, Deps{
		Log:       log,
		App:       svc,
		Queries:   q,
		Waiter:    waiter,
		Limiter:   NewPGRateLimiter(pool, cfg.RateLimitPerMinute),
		Idem:      NewIdempotencyStore(pool, WithIdempotencyLogger(orNop(log)), WithIdempotencyFence(engine)),
		Registry:  reg,
		Ping:      pool.Ping,
		Directory: QueriesDirectory{Q: q},
		Webhooks:  webhooks.NewOutbox(pool),
	})
}

// App returns the application the server drives (tests issue commands
// through it directly).
func (s *Server) App() *app.Service { return s.app }

func orNop(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}
