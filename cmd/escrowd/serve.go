package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/dashauth"
	"github.com/escrowd/escrowd/internal/inbox"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
)

// httpConfig maps the service configuration onto the HTTP layer's.
func httpConfig(cfg Config) httpapi.Config {
	return httpapi.Config{
		Hosts: cfg.Hosts, DefaultEnvironment: cfg.DefaultEnvironment,
		RateLimitPerMinute: cfg.RateLimitPerMinute, TrustedProxies: cfg.TrustedProxies,
		BSCMasterAddress: map[domain.Environment]string{domain.Test: cfg.BSCMasterTest, domain.Live: cfg.BSCMasterLive},
		PublicURL:        cfg.PublicURL, FilesQuota: cfg.FilesQuotaMB << 20, FilesFolder: oldFilesFolder(cfg),
		WebhookAllowPrivate: cfg.WebhookAllowPriv,
	}
}

// oldFilesFolder is the folder older servers kept uploaded files in
// (served until `escrowd files move` empties it); "" without a data
// directory.
func oldFilesFolder(cfg Config) string {
	if cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(cfg.DataDir, "files")
}

// newRegistry is the process's Prometheus registry: the API serves it, the
// webhooks role's dispatcher adds the outbox gauges.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newAPI assembles the API over an open environment, with the payment
// providers of cfg; webhooksRole says the process runs the webhooks role
// too, so /readyz checks its subscriber.
func newAPI(ctx context.Context, cfg Config, env *cliEnv, runner *projections.Runner, reg *prometheus.Registry, webhooksRole bool) (*httpapi.Server, error) {
	providers := map[domain.Environment]wiring.Provider{}
	for e, p := range cfg.Providers {
		providers[e] = wiring.Provider{Name: p.Name, SecretKey: string(p.SecretKey), BaseURL: p.BaseURL, DVABank: p.DVABank}
	}
	gateways, err := wiring.Gateways(providers)
	if err != nil {
		return nil, err
	}
	hc := httpConfig(cfg)
	hc.ReadyWebhooks = webhooksRole
	if hc.Files, err = openFiles(cfg, env); err != nil {
		return nil, err
	}
	if hc.Dashboard, err = dashboardUsers(ctx, env); err != nil {
		if ctx.Err() == nil {
			return nil, err
		}
		// Stopping before serving anything: no dashboard is offered, and
		// the plain secrets are sealed at the next start.
		hc.Dashboard = nil
	}
	api := wiring.API(hc, env.Store, env.Pool, runner, env.Log, reg)
	if cfg.Providers != nil { // a Config not read by LoadConfig keeps the defaults
		api.App().Gateways = gateways
	}
	return api, nil
}

// dashboardUsers is the dashboard's users and sessions, their login
// emails and TOTP secrets sealed with the merchants' data keys, through the same keyring
// as the events' sealed fields (one cache, so an erased key is erased for
// both). Values an earlier version kept in plain text are sealed first,
// so none stays readable once this version has started.
func dashboardUsers(ctx context.Context, env *cliEnv) (*dashauth.Store, error) {
	users := dashauth.NewStore(env.Pool, env.Keyring)
	n, err := users.SealPlainSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("dashboard: seal the emails and TOTP secrets kept in plain text: %w", err)
	}
	if n > 0 {
		env.Log.Info("dashboard: sealed TOTP secrets kept in plain text", zap.Int("users", n))
	}
	return users, nil
}

var serveCommand = &command{
	name: "serve", args: "[--role api,projector,webhooks] [--addr :8080] [--demo]",
	summary: "run the HTTP API, the projectors and the webhook subscriber and dispatcher",
	detail: `Roles (default: all three):
  api        the HTTP API (and the payout resumer and the scheduler that
             acts on escrows' deadlines: auto-release, unpaid expiry,
             the window-ending and milestone-due reminders; every
             ESCROW_DEADLINES_INTERVAL, default 10s)
  projector  keeps the read models current
  webhooks   the webhook subscriber (fills the outbox) and a dispatcher
The address is claimed first: a taken one is reported before anything else.
--demo is what make run runs: without DATABASE_URL it starts the checkout's
throwaway database (scripts/pg.sh), and unless they are set it turns the
rate limit off (ESCROW_RATE_LIMIT_PER_MINUTE=0), allows webhooks to this
machine (ESCROW_WEBHOOK_ALLOW_PRIVATE=true) and logs for a terminal; then it
prints the demo merchant's keys and a block for a second terminal.
SIGINT or SIGTERM stops it: it logs the signal, stops taking requests, lets
those in flight finish (up to 15 s) and logs when it has stopped.`,
	prepare:  prepareServe,
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		roles := fs.String("role", "api,projector,webhooks", "comma-separated roles to run: api, projector, webhooks")
		fs.String("addr", "", "listen address (default ESCROW_ADDR, or :8080)")
		demo := fs.Bool("demo", false, "the sandbox make run starts: a demo merchant, its keys and requests to try, no rate limit")
		return func(ctx context.Context, inv *invocation) error {
			cfg := inv.cfg
			if inv.listener != nil && os.Getenv("ESCROW_PUBLIC_URL") == "" {
				cfg.PublicURL = localURL(inv.listener.Addr()) // the port actually claimed
			}
			if *demo && inv.listener != nil {
				if err := printDemo(ctx, cfg, inv.env, localURL(inv.listener.Addr())); err != nil {
					return err
				}
			}
			return serve(ctx, cfg, inv.env, *roles, inv.listener)
		}
	},
}

// listenMetrics claims the metrics address, saying what to do when it is
// taken.
func listenMetrics(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("the metrics address %s is taken; choose another with ESCROW_METRICS_ADDR (or off)", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("ESCROW_METRICS_ADDR: %w", err)
	}
	return ln, nil
}

// metricsMux serves GET /metrics and nothing else.
func metricsMux(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", httpapi.MetricsHandler(reg))
	return mux
}

// serve runs the roles until ctx ends (a signal), logging the shutdown; the
// API serves on ln.
func serve(ctx context.Context, cfg Config, env *cliEnv, roles string, ln net.Listener) error {
	want := map[string]bool{}
	for _, r := range strings.Split(roles, ",") {
		r = strings.TrimSpace(r)
		if r != "api" && r != "projector" && r != "webhooks" {
			// A typo ("--role projectors") must not start nothing and exit
			// 0, which a supervisor reads as a clean stop.
			return usageError(fmt.Sprintf("serve: unknown role %q (want api, projector, webhooks)", r))
		}
		want[r] = true
	}
	if name, err := namedByPlainValue(ctx, env); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	} else if name != "" {
		// Serving would look these up by their blind index and miss them:
		// a deposit into such a dedicated account would find no holder.
		return fmt.Errorf("serve: the event log has streams named by a plain email, phone or account number (%s), as an earlier version named them: stop every escrowd process, take a backup and run escrowd events seal --i-have-a-backup", name)
	}
	runner := projections.NewRunner(env.Store, env.Pool, env.Log, env.Projectors...)
	reg := newRegistry()
	reg.MustRegister(newParkedCollector(runner))
	if hr, ok := env.Store.(eventstore.HorizonReporter); ok {
		reg.MustRegister(newHorizonCollector(hr))
	}
	reg.MustRegister(newInboxCollector(inbox.Store{Pool: env.Pool}))
	if as, ok := env.Raw.(interface{ AppendStats() postgres.AppendStats }); ok {
		reg.MustRegister(newAppendCollector(as))
	}
	var metrics net.Listener
	if cfg.MetricsAddr != "off" {
		var err error
		if metrics, err = listenMetrics(cfg.MetricsAddr); err != nil {
			return err
		}
		defer metrics.Close()
	}
	signaled := ctx
	g, ctx := errgroup.WithContext(ctx)
	if metrics != nil {
		// The metrics have a listener of their own, so that the API's
		// address (public, behind a load balancer) never exposes them.
		msrv := &http.Server{Handler: metricsMux(reg), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			env.Log.Info("metrics listening", zap.String("addr", metrics.Addr().String()))
			if err := msrv.Serve(metrics); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return msrv.Shutdown(sctx)
		})
	}
	g.Go(func() error {
		<-ctx.Done()
		if signaled.Err() != nil { // a signal, not a failed role
			env.Log.Info("shutting down", zap.String("cause", context.Cause(signaled).Error()))
		}
		return nil
	})
	if want["projector"] {
		g.Go(func() error {
			err := runner.Run(ctx)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		})
	}
	if want["webhooks"] {
		g.Go(func() error { return runWebhooks(ctx, cfg, env, reg) })
	}
	if want["api"] {
		if ln == nil {
			return errors.New("serve: the api role has no address to listen on")
		}
		api, err := newAPI(ctx, cfg, env, runner, reg, want["webhooks"])
		if err != nil {
			return err
		}
		defer api.Close()
		// Withdrawals left debited and unpaid are finished in the
		// background, by every API process (the payout lease keeps them
		// from asking the provider twice at once).
		resumer := &app.PayoutResumer{Service: api.App(), Find: payoutsInFlight(env.queries()), Log: env.Log}
		g.Go(func() error { return ignoreCanceled(resumer.Run(ctx)) })
		// Escrows' deadlines (auto-release, unpaid expiry, reminders) are
		// acted on by every API process too.
		deadlines := wiring.DeadlineScheduler(api.App(), env.queries(), env.Log)
		deadlines.Interval, deadlines.Lease = cfg.DeadlinesInterval, cfg.DeadlinesLease
		deadlines.RemoveFiles = api.Files().Remove // an expired escrow's files go with it
		g.Go(func() error { return ignoreCanceled(deadlines.Run(ctx)) })
		// Files nothing refers to any more are collected by every API
		// process, every few hours (escrowd files collect does the same on
		// demand).
		firstCollection := 5*time.Minute + rand.N(5*time.Minute)
		g.Go(func() error {
			return ignoreCanceled(runFileCollection(ctx, env, api.Files().Backend(), firstCollection, collectEvery))
		})
		// Providers' events kept by any API process are processed by
		// every one (each event by one at a time).
		g.Go(func() error { return ignoreCanceled(api.ProviderEvents().Run(ctx)) })
		// Yesterday's payouts are compared with the providers' transfers
		// once a day (escrowd reconcile does the same on demand).
		daily := newDailyReconciler(api.App(), env.queries(), env.Pool, env.Log)
		reg.MustRegister(daily)
		g.Go(func() error { return daily.Run(ctx) })
		srv := api.HTTPServer(ln.Addr().String(), httpapi.DefaultLimits)
		g.Go(func() error {
			env.Log.Info("listening", zap.String("addr", ln.Addr().String()))
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	err := g.Wait()
	if signaled.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil // a role cut short by the signal (still starting, say)
	}
	if err != nil {
		env.Log.Error("stopped", zap.Error(err))
		return err
	}
	env.Log.Info("stopped")
	return nil
}

// payoutsInFlight lists withdrawals paying out from the ledger read model.
// Until the ledger projector of this version has run (an API upgraded
// before the projector role), its table is missing: nothing is listed.
func payoutsInFlight(q *projections.Queries) func(context.Context, app.PayoutRef, time.Time, int) ([]app.PayoutRef, error) {
	return func(ctx context.Context, after app.PayoutRef, before time.Time, limit int) ([]app.PayoutRef, error) {
		ps, err := q.PayoutsInFlightAfter(ctx, projections.PayoutInFlight{MerchantID: after.MerchantID,
			Environment: after.Environment, Reference: after.Reference, DebitedAt: after.DebitedAt}, before, limit)
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42P01" {
			return nil, nil
		}
		out := make([]app.PayoutRef, len(ps))
		for i, p := range ps {
			out[i] = app.PayoutRef{MerchantID: p.MerchantID, Environment: p.Environment, Reference: p.Reference, DebitedAt: p.DebitedAt}
		}
		return out, err
	}
}
