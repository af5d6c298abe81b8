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
	auth := NewAuthCache(QueriesDirectory{Q: q}, store, log)
	// The engine's appends are watched, so that an auth change made through
	// this server counts for the next request at once (see AuthCache).
	engine := app.NewEngine(auth.WatchStore(store), aggregateCacheSize)
	svc := app.NewService(engine)
	for env, addr := range cfg.BSCMasterAddress {
		if addr != "" {
			svc.CryptoMaster[env] = addr
		}
	}
	s := New(cfg, Deps{
		Log:       log,
		App:       svc,
		Queries:   q,
		Last:      store.Last,
		EventLog:  store,
		Waiter:    waiter,
		Limiter:   NewPGRateLimiter(pool, cfg.RateLimitPerMinute),
		Idem:      NewIdempotencyStore(pool, WithIdempotencyLogger(orNop(log)), WithIdempotencyFence(engine)),
		Registry:  reg,
		Ping:      pool.Ping,
		Directory: auth,
		Webhooks:  webhooks.NewOutbox(pool),
	})
	s.closers = append(s.closers, auth.Close)
	return s
}

// Close stops the server's background work (the auth cache's log tail). It
// does not close the store or the pool, which the caller owns.
func (s *Server) Close() {
	for _, c := range s.closers {
		c()
	}
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
