package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

func service(env *cliEnv) *app.Service { return app.NewService(app.NewEngine(env.Store, 1000)) }

// publish makes an operator change visible to the read models before the
// command returns, whether or not a server is running.
func publish(ctx context.Context, env *cliEnv, pos eventstore.Position) error {
	if pos == (eventstore.Position{}) {
		return nil
	}
	return projections.CatchUpTo(ctx, env.Store, env.Pool, env.Log, pos, env.Projectors...)
}

func parseEnv(s string) (domain.Environment, error) {
	e := domain.Environment(s)
	if !e.Valid() {
		return "", usageError("--env must be test or live")
	}
	return e, nil
}

func cmdMerchant(ctx context.Context, cfg Config, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usageError("merchant: missing subcommand")
	}
	fs := flag.NewFlagSet("merchant "+args[0], flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	svc := service(env)
	switch args[0] {
	case "create":
		name := fs.String("name", "", "merchant name")
		business := fs.Bool("business", false, "merchant may sell as itself")
		country := fs.String("country", "NG", "default customer country (id or ISO code)")
		asJSON := fs.Bool("json", false, "print JSON")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		if *name == "" {
			return usageError("merchant create: --name is required")
		}
		out, err := svc.CreateMerchant(ctx, *name, *business, *country, httpapi.KeyDigest)
		if err != nil {
			return err
		}
		if err := publish(ctx, env, out.Position); err != nil {
			return err
		}
		return printMerchant(env, out, *asJSON)
	case "set-webhook":
		id := fs.String("merchant", "", "merchant id")
		e := fs.String("env", "test", "environment")
		u := fs.String("url", "", "callback URL (empty clears)")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		environment, err := parseEnv(*e)
		if err != nil {
			return err
		}
		if err := webhooks.ValidateCallbackURL(ctx, *u, environment, cfg.WebhookAllowPriv, nil); err != nil {
			return err
		}
		return operatorUpdate(ctx, env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
			return []domain.Event{merchant.WebhookURLSet{Environment: environment, URL: *u}}, nil
		})
	case "rotate-secret":
		id := fs.String("merchant", "", "merchant id")
		e := fs.String("env", "test", "environment")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		environment, err := parseEnv(*e)
		if err != nil {
			return err
		}
		secret := app.NewSigningSecret()
		if err := operatorChange(ctx, env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
			return []domain.Event{merchant.SigningSecretRotated{Environment: environment, Secret: secret}}, nil
		}); err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, secret)
		return nil
	case "set-signing-secret":
		id := fs.String("merchant", "", "merchant id")
		e := fs.String("env", "", "environment: test or live")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		if fs.NArg() > 0 {
			return usageError("merchant set-signing-secret: the secret is read from standard input, not taken as an argument")
		}
		environment, err := parseEnv(*e)
		if err != nil {
			return err
		}
		secret, err := readSecret(env.Stdin, env.Stderr)
		if err != nil {
			return err
		}
		return operatorUpdate(ctx, env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
			return merchant.SetSigningSecret(m, environment, secret)
		})
	case "set-allowlist":
		id := fs.String("merchant", "", "merchant id")
		ips := fs.String("ips", "", "comma-separated addresses or CIDRs (empty clears)")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		var entries []string
		for _, s := range strings.Split(*ips, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if _, _, err := net.ParseCIDR(s); err != nil && net.ParseIP(s) == nil {
				return fmt.Errorf("set-allowlist: %q is not an IP address or CIDR", s)
			}
			entries = append(entries, s)
		}
		return operatorUpdate(ctx, env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
			return []domain.Event{merchant.AllowlistSet{Entries: entries}}, nil
		})
	case "set-fees":
		id := fs.String("merchant", "", "merchant id")
		escrowFee := fs.Int64("escrow-fee-bps", -1, "escrow fee in basis points (250 = 2.5%)")
		commission := fs.Int64("commission-bps", -1, "merchant share of the escrow fee in basis points")
		vaultFee := fs.Int64("vault-fee-bps", -1, "vault platform fee in basis points")
		vaultCommission := fs.Int64("vault-commission-bps", -1, "merchant share of the vault fee in basis points")
		bankFee := fs.Int64("bank-withdrawal-fee-kobo", -1, "fee per bank payout, in kobo")
		cryptoFee := fs.Int64("crypto-withdrawal-fee-kobo", -1, "fee per crypto payout, in kobo")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		return operatorUpdate(ctx, env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
			f := m.Fees
			for _, o := range []struct {
				v   int64
				dst *int64
			}{{*escrowFee, &f.EscrowFeeBps}, {*commission, &f.CommissionBps}, {*vaultFee, &f.VaultFeeBps},
				{*vaultCommission, &f.VaultCommissionBps}, {*bankFee, &f.BankWithdrawalFee}, {*cryptoFee, &f.CryptoWithdrawalFee}} {
				if o.v >= 0 {
					*o.dst = o.v
				}
			}
			if err := merchant.ValidateFees(f); err != nil {
				return nil, err
			}
			return []domain.Event{merchant.FeesSet{Fees: f}}, nil
		})
	}
	return usageError("merchant: unknown subcommand " + args[0])
}

// maxSecretInput bounds what set-signing-secret reads: a secret is a line.
const maxSecretInput = 4096

// readSecret reads a secret from standard input: from a terminal without
// echoing it, otherwise everything piped in. One line ending (\n or \r\n)
// is dropped; anything else is the secret as given and the domain checks it.
// The secret is never printed or logged.
func readSecret(in io.Reader, prompt io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "Signing secret (not echoed): ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("reading the secret: %w", err)
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(in, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("reading the secret: %w", err)
	}
	if len(b) > maxSecretInput {
		return "", fmt.Errorf("the signing secret must be one line of at most %d bytes", maxSecretInput)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", usageError("merchant set-signing-secret: pipe the secret on standard input")
	}
	return s, nil
}

// operatorUpdate applies a merchant change and prints "ok".
func operatorUpdate(ctx context.Context, env *cliEnv, svc *app.Service, id string, decide func(merchant.State) ([]domain.Event, error)) error {
	if err := operatorChange(ctx, env, svc, id, decide); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, "ok")
	return nil
}

// operatorChange applies a merchant change and publishes it to the read models.
func operatorChange(ctx context.Context, env *cliEnv, svc *app.Service, id string, decide func(merchant.State) ([]domain.Event, error)) error {
	if id == "" {
		return usageError("--merchant is required")
	}
	pos, err := svc.UpdateMerchant(ctx, id, decide)
	if err != nil {
		return err
	}
	return publish(ctx, env, pos)
}

func printMerchant(env *cliEnv, out app.CreatedMerchant, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintf(env.Stdout, "merchant %s\n", out.MerchantID)
	for _, k := range out.Keys {
		fmt.Fprintf(env.Stdout, "  %-4s %-11s %s\n", k.Environment, k.Role, k.Key)
	}
	fmt.Fprintf(env.Stdout, "  signing secrets: test %s\n                   live %s\n", out.SigningSecrets[domain.Test], out.SigningSecrets[domain.Live])
	return nil
}

func cmdKey(ctx context.Context, cfg Config, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usageError("key: missing subcommand")
	}
	fs := flag.NewFlagSet("key "+args[0], flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	id := fs.String("merchant", "", "merchant id")
	svc := service(env)
	switch args[0] {
	case "create":
		e := fs.String("env", "test", "environment")
		role := fs.String("role", "standard", "standard or super_admin")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		environment, err := parseEnv(*e)
		if err != nil {
			return err
		}
		k, pos, err := svc.IssueKey(ctx, *id, environment, merchant.Role(*role), httpapi.KeyDigest)
		if err != nil {
			return err
		}
		if err := publish(ctx, env, pos); err != nil {
			return err
		}
		return json.NewEncoder(env.Stdout).Encode(k)
	case "revoke":
		keyID := fs.String("key-id", "", "key id")
		if err := fs.Parse(args[1:]); err != nil {
			return usageError(err.Error())
		}
		return operatorUpdate(ctx, env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
			return merchant.RevokeKey(m, *keyID, svc.Engine.Now())
		})
	}
	return usageError("key: unknown subcommand " + args[0])
}
