package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
)

// cmdDemo creates a demo merchant on first use (remembered in
// ESCROW_DATA_DIR/demo-merchant.json, since keys are shown only once) and
// prints its keys and a first request to try.
func cmdDemo(ctx context.Context, cfg Config, env *cliEnv, args []string) error {
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

Try it:
  curl -s -X POST %s/v1/customer/create \
    -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' \
    -d '{"firstname":"Ada","lastname":"Obi","email":"ada@example.com","phone":"08031234567"}'
  curl -s %s/v1/customers -H 'Authorization: Bearer %s'

Webhooks: run a local receiver in another terminal, then point the demo merchant at it:
  ./bin/escrowd webhooks listen --port 9000 --secret %s
  curl -s -X PUT %s/v1/merchant/webhook \
    -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' \
    -d '{"url":"http://127.0.0.1:9000/"}'
  (or: ./bin/escrowd merchant set-webhook --merchant %s --env test --url http://127.0.0.1:9000/)
  Deliveries and retries: curl -s %s/v1/merchant/webhook/deliveries -H 'Authorization: Bearer %s'

`, out.MerchantID, path, sa, std, out.SigningSecrets[domain.Test], base, sa, base, std,
		out.SigningSecrets[domain.Test], base, sa, out.MerchantID, base, sa)
	fmt.Fprintf(env.Stdout, "Hosted checkout: open this link in a browser and pay a demo escrow as a demo buyer:\n  %s\n\n", checkoutLink)
	return nil
}
