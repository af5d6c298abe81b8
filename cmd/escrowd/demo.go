package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
)

var demoCommand = &command{
	name: "demo", summary: "create (once) and print a demo merchant, with its keys and requests to try",
	detail:   "The merchant is remembered in ESCROW_DATA_DIR/demo-merchant.json, since keys are shown only once.",
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, inv *invocation) error { return demo(ctx, inv.cfg, inv.env) }
	},
}

// demo creates a demo merchant on first use (remembered in
// ESCROW_DATA_DIR/demo-merchant.json, since keys are shown only once) and
// prints its keys and a first request to try.
func demo(ctx context.Context, cfg Config, env *cliEnv) error {
	path := filepath.Join(cfg.DataDir, "demo-merchant.json")
	var out app.CreatedMerchant
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &out); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	} else {
		created, err := service(env).CreateMerchant(ctx, "Demo Merchant", true, "NG", httpapi.KeyDigest)
		if err != nil {
			return err
		}
		if err := publish(ctx, env, created.Position); err != nil {
			return err
		}
		out = created
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	}
	var sa, std string
	for _, k := range out.Keys {
		if k.Environment == domain.Test && k.Role == "super_admin" {
			sa = k.Key
		}
		if k.Environment == domain.Test && k.Role == "standard" {
			std = k.Key
		}
	}
	base := cfg.PublicURL
	checkoutLink, err := demoCheckoutLink(ctx, cfg, env, out.MerchantID)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, `
Demo merchant %s (business, NG), keys kept in %s
  test super-admin key: %s
  test standard key:    %s
  test signing secret:  %s

To try it, paste into a second terminal, in this checkout:

  export DATABASE_URL=%s
  SA=%s
  STD=%s
  curl -s %s/v1/customers -H "Authorization: Bearer $STD"
  ./bin/escrowd projections status

The operator commands (./bin/escrowd help) read DATABASE_URL.
The API allows each key %s.

Webhooks: run a local receiver in another terminal, then point the demo merchant at it:
  ./bin/escrowd webhooks listen --port 9000 --secret %s
  curl -s -X PUT %s/v1/merchant/webhook \
    -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' \
    -d '{"url":"http://127.0.0.1:9000/"}'
  (or: ./bin/escrowd merchant set-webhook --merchant %s --env test --url http://127.0.0.1:9000/)
  Deliveries and retries: curl -s %s/v1/merchant/webhook/deliveries -H 'Authorization: Bearer %s'

`, out.MerchantID, path, sa, std, out.SigningSecrets[domain.Test],
		shellQuote(pasteableURL(cfg.DatabaseURL)), sa, std, base, rateLimit(cfg.RateLimitPerMinute),
		out.SigningSecrets[domain.Test], base, sa, out.MerchantID, base, sa)
	fmt.Fprintf(env.Stdout, "Hosted checkout: open this link in a browser and pay a demo escrow as a demo buyer:\n  %s\n\n", checkoutLink)
	return nil
}

// pasteableURL is the database URL to print: with its password hidden, if
// it has one (the throwaway database has none).
func pasteableURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<DATABASE_URL>"
	}
	return u.Redacted()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func rateLimit(perMinute int) string {
	if perMinute == 0 {
		return "any number of requests (ESCROW_RATE_LIMIT_PER_MINUTE=0)"
	}
	return fmt.Sprintf("%d requests a minute (ESCROW_RATE_LIMIT_PER_MINUTE)", perMinute)
}
