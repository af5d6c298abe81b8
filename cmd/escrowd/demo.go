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
		return func(ctx context.Context, inv *invocation) error {
			return printDemo(ctx, inv.cfg, inv.env, inv.cfg.PublicURL)
		}
	},
}

// demoMerchant is the demo merchant, created on first use and remembered
// in ESCROW_DATA_DIR/demo-merchant.json, since keys are shown only once.
func demoMerchant(ctx context.Context, cfg Config, env *cliEnv) (out app.CreatedMerchant, path string, err error) {
	path = filepath.Join(cfg.DataDir, "demo-merchant.json")
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &out); err != nil {
			return out, path, fmt.Errorf("%s: %w", path, err)
		}
		return out, path, nil
	}
	created, err := service(env).CreateMerchant(ctx, "Demo Merchant", true, "NG", httpapi.KeyDigest)
	if err != nil {
		return out, path, err
	}
	if err := publish(ctx, env, created.Position); err != nil {
		return out, path, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return out, path, err
	}
	b, _ := json.MarshalIndent(created, "", "  ")
	return created, path, os.WriteFile(path, b, 0o600)
}

// printDemo prints the demo merchant's keys and a block to paste into a
// second terminal: the variables the README's first session and the
// operator commands read, with api the base URL the server answers at.
func printDemo(ctx context.Context, cfg Config, env *cliEnv, api string) error {
	out, path, err := demoMerchant(ctx, cfg, env)
	if err != nil {
		return err
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
  export ESCROW_MASTER_KEY_FILE=%s
  export ESCROW_WEBHOOK_ALLOW_PRIVATE=%t
  export SA=%s
  export STD=%s
  export API=%s
  curl -s "$API/v1/customers" -H "Authorization: Bearer $STD"
  ./bin/escrowd projections status

The operator commands (./bin/escrowd help) read DATABASE_URL and the master
key of the personal data sealed in the log (ESCROW_MASTER_KEY_FILE), and
ESCROW_WEBHOOK_ALLOW_PRIVATE lets them point a test merchant at a receiver
on this machine. The API allows each key %s.

Webhooks: run a local receiver in a third terminal:
  ./bin/escrowd webhooks listen --port 9000 --secret %s
then point the demo merchant at it, from the second terminal:
  curl -s -X PUT "$API/v1/merchant/webhook" -H "Authorization: Bearer $SA" \
    -H 'Content-Type: application/json' -d '{"url":"http://127.0.0.1:9000/"}'
  (or: ./bin/escrowd merchant set-webhook --merchant %s --env test --url http://127.0.0.1:9000/)
  Deliveries and retries: curl -s "$API/v1/merchant/webhook/deliveries" -H "Authorization: Bearer $SA"

`, out.MerchantID, path, sa, std, out.SigningSecrets[domain.Test],
		shellQuote(pasteableURL(cfg.DatabaseURL)), shellQuote(absPath(cfg.MasterKeyFile)), cfg.WebhookAllowPriv, sa, std, api, rateLimit(cfg.RateLimitPerMinute),
		out.SigningSecrets[domain.Test], out.MerchantID)
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
		return "any number of requests (ESCROW_RATE_LIMIT_PER_MINUTE=10 make run sets a limit, as serve's default is)"
	}
	return fmt.Sprintf("%d requests a minute (ESCROW_RATE_LIMIT_PER_MINUTE)", perMinute)
}

// absPath is path made absolute when it can be, so that the block pasted
// into a terminal elsewhere still names the file.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
