package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/webhooks"
)

// runWebhooks is the webhooks role of serve: the subscriber that fills the
// outbox (active in one process at a time) and a dispatcher (every process
// running the role shares the deliveries; the active subscriber hands its
// own some first attempts directly), which also sweeps the outbox
// (ESCROW_WEBHOOK_RETENTION) and keeps the outbox gauges on reg.
func runWebhooks(ctx context.Context, cfg Config, env *cliEnv, reg prometheus.Registerer) error {
	// The dispatcher opens bodies sealed with customers' keys: a customer
	// erased by another process stops opening here as soon as the
	// erasure is read. The watch starts before anything here opens.
	defer wiring.WatchErasures(env.Store, env.Log)()
	d := &webhooks.Dispatcher{Pool: env.Pool, Endpoints: wiring.Endpoints(env.Store), Sealer: wiring.Sealer(env.Store), Log: env.Log,
		AllowPrivate: cfg.WebhookAllowPriv, Retention: cfg.WebhookRetention, Metrics: webhooks.NewMetrics(reg),
		SignatureHeaders: cfg.WebhookSignatureHeaders, UserAgent: cfg.WebhookUserAgent}
	// While this process's subscriber is the active one, it hands this
	// dispatcher the first attempts it has room for directly.
	sub := wiring.Subscriber(env.Store, env.Pool)
	sub.Handoff = d
	runner, err := wiring.SubscriberRunner(ctx, env.Store, env.Pool, env.Log, sub)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ignoreCanceled(runner.Run(ctx)) })
	g.Go(func() error { return ignoreCanceled(d.Run(ctx)) })
	return g.Wait()
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

var webhooksListenCommand = &command{
	name: "webhooks listen", args: "[--port 9000] [--secret S] [--body]",
	summary: "a local receiver that verifies and prints each webhook",
	detail: `One line per webhook: time, event, id, attempt and whether the signature
verifies (a bad one is answered 401, so the delivery log shows it).`,
	define: func(fs *flag.FlagSet) runFunc {
		port := fs.Int("port", 9000, "port to listen on")
		host := fs.String("host", "127.0.0.1", "address to listen on")
		secret := fs.String("secret", "", "signing secret to verify with (default ESCROW_WEBHOOK_SECRET)")
		body := fs.Bool("body", false, "print each payload too")
		return func(ctx context.Context, inv *invocation) error {
			s := *secret
			if s == "" {
				s = os.Getenv("ESCROW_WEBHOOK_SECRET")
			}
			return listenWebhooks(ctx, inv.stdout, *host, *port, s, *body)
		}
	},
}

// listenWebhooks serves the receiver until ctx ends.
func listenWebhooks(ctx context.Context, stdout io.Writer, host string, port int, secret string, body bool) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	check := "signatures checked"
	if secret == "" {
		check = "no secret: signatures not checked (--secret or ESCROW_WEBHOOK_SECRET)"
	}
	fmt.Fprintf(stdout, "listening on http://%s/ (%s); Ctrl-C stops\n", l.Addr(), check)
	srv := &http.Server{Handler: listenHandler(secret, body, stdout), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenHandler prints one line per webhook: time, event, id, attempt and
// whether the signature verifies. A bad signature is answered 401, so the
// delivery log shows it; everything else 200.
func listenHandler(secret string, showBody bool, out io.Writer) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || r.Method != http.MethodPost {
			http.Error(w, "POST a webhook", http.StatusBadRequest)
			return
		}
		var env webhooks.Envelope
		_ = json.Unmarshal(raw, &env)
		sig, status := "signature unchecked", http.StatusOK
		if secret != "" {
			if webhooks.Verify(secret, raw, r.Header.Get(webhooks.SignatureHeader)) {
				sig = "signature ok"
			} else {
				sig, status = "signature BAD", http.StatusUnauthorized
			}
		}
		mu.Lock()
		fmt.Fprintf(out, "%s  %-28s id=%s attempt=%s  %s\n", time.Now().UTC().Format(webhooks.TimestampFormat),
			env.Event, env.ID, r.Header.Get(webhooks.AttemptHeader), sig)
		if showBody {
			fmt.Fprintf(out, "  %s\n", raw)
		}
		mu.Unlock()
		w.WriteHeader(status)
	})
}
