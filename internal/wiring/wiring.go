// Package wiring assembles the process: the application over the event
// store, the HTTP API over it and the read models, and the webhook role
// (subscriber, its runner, the endpoint lookup). cmd/escrowd and the
// benchmarks build the service through it, and the httpapi end-to-end
// harness too (see httpapi/wiring_ext_test.go), so every one of them runs
// the wiring production runs. Nothing else imports it: it is the one
// package that may import every adapter.
package wiring

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/files"
	"github.com/escrowd/escrowd/internal/gateway"
	"github.com/escrowd/escrowd/internal/gateway/paystackgw"
	"github.com/escrowd/escrowd/internal/inbox"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

// aggregateCacheSize bounds the API's command engine's aggregate cache.
const aggregateCacheSize = 100_000

// maxCachedMerchants bounds the webhook role's engine cache: it reads
// merchants only (least recently used go first).
const maxCachedMerchants = 10_000

// API assembles the HTTP API over an event store and its PostgreSQL pool
// (read models, rate limits, idempotency keys, and uploaded files unless
// cfg.Files names another store); waiter is the projection
// runner reads wait for. reg may be nil. Close the server to stop its
// background work; the store and the pool stay the caller's.
func API(cfg httpapi.Config, store eventstore.Store, pool *pgxpool.Pool, waiter httpapi.Waiter, log *zap.Logger, reg *prometheus.Registry) *httpapi.Server {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Files == nil {
		cfg.Files = files.Postgres{Pool: pool}
	}
	q := projections.NewQueries(pool, Sealer(store))
	auth := httpapi.NewAuthCache(httpapi.QueriesDirectory{Q: q}, store, log)
	// The engine's appends are watched, so that an auth change made through
	// this server counts for the next request at once (see AuthCache).
	engine := app.NewEngine(auth.WatchStore(store), aggregateCacheSize)
	svc := application(engine, store, pool)
	// An erasure recorded by another process counts here at once: the
	// customer's data stops opening and their cached state goes.
	stopErasures := WatchErasures(store, log, engine)
	for env, addr := range cfg.BSCMasterAddress {
		if addr != "" {
			svc.CryptoMaster[env] = addr
		}
	}
	// Providers' events are kept by any API process and processed by the
	// worker of each (the inbox's claims keep them from taking one event
	// at once).
	uses := httpapi.NewKeyUses(pool, log)
	events := (&inbox.Worker{Store: inbox.Store{Pool: pool}, Log: log,
		Handle: func(ctx context.Context, it inbox.Item) (string, error) {
			return svc.ProcessProviderEvent(ctx, it.Environment, it.Provider, it.Body)
		}}).Init()
	return httpapi.New(cfg, httpapi.Deps{
		Log:      log,
		App:      svc,
		Queries:  q,
		Last:     store.Last,
		EventLog: store,
		Waiter:   waiter,
		Limiter:  httpapi.NewPGRateLimiter(pool, cfg.RateLimitPerMinute),
		// A request's commands write under its idempotency reservation: the
		// engine fences them (see httpapi.ReservationFencer).
		Idem: httpapi.NewIdempotencyStore(pool, httpapi.WithIdempotencyLogger(log), httpapi.WithIdempotencyFence(engine),
			httpapi.WithIdempotencySealer(Sealer(store))),
		KeyUses:   uses,
		Registry:  reg,
		Ping:      pool.Ping,
		Directory: auth,
		Webhooks:  webhooks.NewOutbox(pool),
		Inbox:     events,
		Dashboard: cfg.Dashboard,
		Closers:   []func(){auth.Close, uses.Close, stopErasures},
	})
}

// Application is the application over store for an operator command or
// a background job, its aggregate cache holding cacheSize aggregates.
func Application(store eventstore.Store, pool *pgxpool.Pool, cacheSize int) *app.Service {
	return application(app.NewEngine(store, cacheSize), store, pool)
}

// application is the application over engine, its payout leases on the
// clock of the database in pool: processes on different machines agree
// on when a lease ends. Over a sealing store (Sealed), customers' emails
// and phones are reserved by their blind index.
func application(engine *app.Engine, store eventstore.Store, pool *pgxpool.Pool) *app.Service {
	svc := app.NewService(engine)
	svc.LeaseClock = postgres.Clock(pool)
	if bi, ok := store.(blindIndexer); ok {
		svc.BlindIndex = bi.BlindIndex
	}
	return svc
}

// blindIndexer is what a sealing store offers for unique values.
type blindIndexer interface {
	BlindIndex(ctx context.Context, purpose, value string) (string, error)
}

// Subscriber is the webhook subscriber over store, its payloads' categories
// read from the read models in pool, its messages sealed with the keys of
// store's codec (a dispatcher opens them with Sealer(store)).
func Subscriber(store eventstore.Store, pool *pgxpool.Pool) *webhooks.Subscriber {
	sub := webhooks.NewSubscriber(store, projections.NewQueries(pool, Sealer(store)).EscrowCategory)
	sub.Sealer = Sealer(store)
	return sub
}

// SubscriberRunner installs the subscriber (webhooks.Install) and returns
// its own projections runner: one process at a time is active for it
// (advisory lock), the others stand by.
func SubscriberRunner(ctx context.Context, store eventstore.Store, pool *pgxpool.Pool, log *zap.Logger, sub *webhooks.Subscriber) (*projections.Runner, error) {
	if _, err := webhooks.Install(ctx, store, pool); err != nil {
		return nil, fmt.Errorf("webhooks: install subscriber: %w", err)
	}
	return projections.NewRunner(store, pool, log, sub), nil
}

// Endpoints is the dispatcher's endpoint lookup: each merchant's current
// settings, read by an application of its own over store (its engine
// caches merchants only, so the lookups do not evict the API's aggregates
// in a process running both roles).
func Endpoints(store eventstore.Store) webhooks.Endpoints {
	return webhooks.MerchantEndpoints{Merchants: app.NewService(app.NewEngine(store, maxCachedMerchants))}
}

// Provider names an environment's payment provider and its settings.
type Provider struct {
	Name      string // "builtin" (the built-in test gateways) or "paystack"
	SecretKey string
	BaseURL   string
	DVABank   string
}

// Gateways are the gateway sets of the configured providers; an
// environment without one has none (it moves no money). A provider that
// cannot be set up is an error: the process must not start offering
// payments that nothing performs.
func Gateways(providers map[domain.Environment]Provider) (map[domain.Environment]gateway.Set, error) {
	out := map[domain.Environment]gateway.Set{}
	for env, p := range providers {
		switch p.Name {
		case "builtin":
			out[env] = gateway.Test()
		case "paystack":
			set, err := paystackgw.New(paystackgw.Config{SecretKey: p.SecretKey, BaseURL: p.BaseURL, DVABank: p.DVABank})
			if err != nil {
				return nil, fmt.Errorf("%s environment: %w", env, err)
			}
			out[env] = set
		default:
			return nil, fmt.Errorf("%s environment: unknown payment provider %q", env, p.Name)
		}
	}
	return out, nil
}
