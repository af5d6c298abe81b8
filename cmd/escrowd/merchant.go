package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/merchant"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/httpapi"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/webhooks"
)

func service(env *cliEnv) *app.Service { return wiring.Application(env.Store, env.Pool, 1000) }

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

var merchantCreateCommand = &command{
	name: "merchant create", args: "--name N [--business] [--country NG] [--compat payluk|none] [--json]",
	summary: "a new merchant: a standard and a super-admin key per environment, and signing secrets",
	detail: "Keys and secrets are printed once: only a digest of each key is stored.\n" +
		"--compat payluk sends its webhooks as the public escrow API does: the signature also under\n" +
		"x-payluk-signature, that API's User-Agent, and signed with the super-admin key of each\n" +
		"environment (the printed signing secrets are then those keys).",
	database: true,
	required: []string{"name"},
	define: func(fs *flag.FlagSet) runFunc {
		name := fs.String("name", "", "merchant name (required)")
		business := fs.Bool("business", false, "merchant may sell as itself")
		country := fs.String("country", "NG", "default customer country (id or ISO code)")
		asJSON := fs.Bool("json", false, "print JSON")
		compat := fs.String("compat", string(merchant.ProfileNone), "webhook compatibility profile: payluk or none")
		return func(ctx context.Context, inv *invocation) error {
			profile, err := merchant.ParseProfile(*compat)
			if err != nil {
				return usageError("--compat must be payluk or none")
			}
			out, err := service(inv.env).CreateMerchantWithProfile(ctx, *name, *business, *country, httpapi.KeyDigest, profile)
			if err != nil {
				return err
			}
			if err := publish(ctx, inv.env, out.Position); err != nil {
				return err
			}
			return printMerchant(inv.env, out, *asJSON)
		}
	},
}

var merchantSetWebhookCommand = &command{
	name: "merchant set-webhook", args: "--merchant M --env test|live --url URL",
	summary:  "the merchant's webhook callback URL (live: https, no private addresses unless ESCROW_WEBHOOK_ALLOW_PRIVATE)",
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		e := fs.String("env", "test", "environment: test or live")
		u := fs.String("url", "", "callback URL (empty clears)")
		return func(ctx context.Context, inv *invocation) error {
			environment, err := parseEnv(*e)
			if err != nil {
				return err
			}
			if err := webhooks.ValidateCallbackURL(ctx, *u, environment, inv.cfg.WebhookAllowPriv, nil); err != nil {
				return err
			}
			return operatorUpdate(ctx, inv.env, service(inv.env), *id, func(m merchant.State) ([]domain.Event, error) {
				return []domain.Event{merchant.WebhookURLSet{Environment: environment, URL: *u}}, nil
			})
		}
	},
}

var merchantSetCompatCommand = &command{
	name: "merchant set-compat", args: "--merchant M [--json] payluk|none",
	summary: "switch the merchant's webhooks to the public escrow API's conventions (payluk) or back (none)",
	detail: "payluk: the signature also under x-payluk-signature, that API's User-Agent, and signed with a\n" +
		"super-admin key per environment. Only digests of existing keys are stored, so a new super-admin\n" +
		"key per environment is issued, printed once and made the signing secret; earlier keys stay valid.\n" +
		"none: the service's own headers again; the signing secrets stay (rotate-secret replaces them).",
	database:   true,
	required:   []string{"merchant"},
	positional: 1,
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 1 {
				return usageError("name the profile: payluk or none")
			}
			profile, err := merchant.ParseProfile(inv.args[0])
			if err != nil {
				return usageError("the profile must be payluk or none")
			}
			out, err := service(inv.env).SetCompat(ctx, *id, profile, httpapi.KeyDigest)
			if err != nil {
				return err
			}
			if err := publish(ctx, inv.env, out.Position); err != nil {
				return err
			}
			if *asJSON {
				return printIndented(inv.stdout, out)
			}
			fmt.Fprintf(inv.stdout, "compat %s\n", out.Compat)
			for _, k := range out.Keys {
				fmt.Fprintf(inv.stdout, "  %-4s %-11s %s (also the webhook signing secret)\n", k.Environment, k.Role, k.Key)
			}
			return nil
		}
	},
}

var merchantRotateSecretCommand = &command{
	name: "merchant rotate-secret", args: "--merchant M --env test|live [--overlap 24h]",
	summary: "a new webhook signing secret for one environment, printed once",
	detail: "--overlap: until that long from now every delivery is signed with both secrets, each signature\n" +
		"header carrying the new signature and the old one comma-separated, so receivers can move to the\n" +
		"new secret without refusing a delivery; after it only the new secret signs. Without it the old\n" +
		"secret stops at once.",
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		e := fs.String("env", "test", "environment: test or live")
		overlap := fs.Duration("overlap", 0, "how long the replaced secret keeps signing beside the new one, such as 24h")
		return func(ctx context.Context, inv *invocation) error {
			environment, err := parseEnv(*e)
			if err != nil {
				return err
			}
			secret := app.NewSigningSecret()
			svc := service(inv.env)
			if err := operatorChange(ctx, inv.env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
				return merchant.RotateSigningSecret(m, environment, secret, svc.Engine.Now(), *overlap)
			}); err != nil {
				return err
			}
			fmt.Fprintln(inv.stdout, secret)
			return nil
		}
	},
}

var merchantSetSigningSecretCommand = &command{
	name: "merchant set-signing-secret", args: "--merchant M --env test|live",
	summary: "make a secret read from standard input (32+ characters) the webhook signing secret",
	detail: "The secret is read from standard input (not echoed on a terminal), never from the command line,\n" +
		"and is never printed or logged: receivers that already verify with it keep working.",
	database:    true,
	required:    []string{"merchant", "env"},
	argsRefusal: "the secret is read from standard input, not taken as an argument",
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		e := fs.String("env", "", "environment: test or live (required)")
		return func(ctx context.Context, inv *invocation) error {
			environment, err := parseEnv(*e)
			if err != nil {
				return err
			}
			secret, err := readSecret(inv.stdin, inv.stderr)
			if err != nil {
				return err
			}
			if err := operatorChange(ctx, inv.env, service(inv.env), *id, func(m merchant.State) ([]domain.Event, error) {
				return merchant.SetSigningSecret(m, environment, secret)
			}); err != nil {
				return err
			}
			fmt.Fprintln(inv.stdout, "ok")
			return nil
		}
	},
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

var merchantSetAllowlistCommand = &command{
	name: "merchant set-allowlist", args: "--merchant M --ips 1.2.3.4,10.0.0.0/8",
	summary:  "the addresses live keys may call from (empty clears)",
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		ips := fs.String("ips", "", "comma-separated addresses or CIDRs (empty clears)")
		return func(ctx context.Context, inv *invocation) error {
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
			return operatorUpdate(ctx, inv.env, service(inv.env), *id, func(m merchant.State) ([]domain.Event, error) {
				return []domain.Event{merchant.AllowlistSet{Entries: entries}}, nil
			})
		}
	},
}

var merchantSetFeesCommand = &command{
	name: "merchant set-fees", args: "--merchant M [--escrow-fee-bps 250] [--commission-bps 5000] ...",
	summary:  "the merchant's fee policy; flags not given keep their value",
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		escrowFee := fs.Int64("escrow-fee-bps", -1, "escrow fee in basis points (250 = 2.5%)")
		commission := fs.Int64("commission-bps", -1, "merchant share of the escrow fee in basis points")
		vaultFee := fs.Int64("vault-fee-bps", -1, "vault platform fee in basis points")
		vaultCommission := fs.Int64("vault-commission-bps", -1, "merchant share of the vault fee in basis points")
		bankFee := fs.Int64("bank-withdrawal-fee-kobo", -1, "fee per bank payout, in kobo")
		cryptoFee := fs.Int64("crypto-withdrawal-fee-kobo", -1, "fee per crypto payout, in kobo")
		return func(ctx context.Context, inv *invocation) error {
			return operatorUpdate(ctx, inv.env, service(inv.env), *id, func(m merchant.State) ([]domain.Event, error) {
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
	},
}

var merchantSetDefaultsCommand = &command{
	name: "merchant set-defaults", args: "--merchant M [--auto-release=true|false]",
	summary: "what the merchant's new escrows take when a request leaves it out; flags not given keep their value",
	detail: `--auto-release: a new standard escrow is released to the seller by the
service when its delivery window elapses while it is ONGOING and undisputed
(a request's autoRelease overrides it). Escrows already created keep theirs.`,
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		var autoRelease optionalBool
		fs.Var(&autoRelease, "auto-release", "release new standard escrows when their delivery window elapses")
		return func(ctx context.Context, inv *invocation) error {
			return operatorUpdate(ctx, inv.env, service(inv.env), *id, func(m merchant.State) ([]domain.Event, error) {
				d := m.EscrowDefaults
				if autoRelease.set {
					d.AutoRelease = autoRelease.v
				}
				return []domain.Event{merchant.EscrowDefaultsSet{Defaults: d}}, nil
			})
		}
	},
}

// optionalBool is a boolean flag that knows whether it was given.
type optionalBool struct{ v, set bool }

func (b *optionalBool) String() string   { return strconv.FormatBool(b.v) }
func (b *optionalBool) IsBoolFlag() bool { return true }
func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.v, b.set = v, true
	return nil
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

// printIndented prints v as indented JSON.
func printIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printMerchant(env *cliEnv, out app.CreatedMerchant, asJSON bool) error {
	if asJSON {
		return printIndented(env.Stdout, out)
	}
	fmt.Fprintf(env.Stdout, "merchant %s\n", out.MerchantID)
	for _, k := range out.Keys {
		fmt.Fprintf(env.Stdout, "  %-4s %-11s %s\n", k.Environment, k.Role, k.Key)
	}
	fmt.Fprintf(env.Stdout, "  signing secrets: test %s\n                   live %s\n", out.SigningSecrets[domain.Test], out.SigningSecrets[domain.Live])
	if out.Compat != merchant.ProfileNone {
		fmt.Fprintf(env.Stdout, "  compat: %s\n", out.Compat)
	}
	return nil
}

var keyCreateCommand = &command{
	name: "key create", args: "--merchant M --env test|live [--role standard|super_admin] [--expires-in 720h]",
	summary: "a new API key, printed once as JSON (only its digest is stored)",
	detail: "--expires-in: the key is refused (401 Access denied) once that long has passed since it was\n" +
		"issued; without it the key is accepted until it is revoked.",
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		e := fs.String("env", "test", "environment: test or live")
		role := fs.String("role", "standard", "standard or super_admin")
		expiresIn := fs.Duration("expires-in", 0, "how long the key is accepted, such as 720h (default: until revoked)")
		return func(ctx context.Context, inv *invocation) error {
			environment, err := parseEnv(*e)
			if err != nil {
				return err
			}
			if *expiresIn < 0 || (*expiresIn > 0 && *expiresIn < time.Minute) {
				return usageError("--expires-in must be at least a minute, such as 720h")
			}
			k, pos, err := service(inv.env).IssueKey(ctx, *id, environment, merchant.Role(*role), httpapi.KeyDigest, *expiresIn)
			if err != nil {
				return err
			}
			if err := publish(ctx, inv.env, pos); err != nil {
				return err
			}
			return json.NewEncoder(inv.stdout).Encode(k)
		}
	},
}

var keyListCommand = &command{
	name: "key list", args: "--merchant M [--json]",
	summary: "the merchant's API keys: hint, role, expiry, revocation and last use",
	detail: "The last use is written by each serving process at most once a minute per key, so it may be\n" +
		"up to a minute old; a key never used since it was issued shows none.",
	database: true,
	required: []string{"merchant"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(ctx context.Context, inv *invocation) error {
			last, err := inv.env.Store.Last(ctx)
			if err != nil {
				return err
			}
			if err := publish(ctx, inv.env, last); err != nil {
				return err
			}
			keys, err := inv.env.queries().Keys(ctx, *id)
			if err != nil {
				return err
			}
			if len(keys) == 0 {
				return domain.Errorf(domain.NotFound, "Merchant not found")
			}
			if *asJSON {
				return printIndented(inv.stdout, keys)
			}
			stamp := func(t *time.Time, none string) string {
				if t == nil {
					return none
				}
				return t.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(inv.stdout, "%-30s %-4s %-11s %-20s %-8s %-20s %s\n", "KEY", "ENV", "ROLE", "HINT", "STATE", "EXPIRES", "LAST USED")
			for _, k := range keys {
				state := "active"
				switch {
				case k.Revoked:
					state = "revoked"
				case k.ExpiresAt != nil && !time.Now().Before(*k.ExpiresAt):
					state = "expired"
				}
				fmt.Fprintf(inv.stdout, "%-30s %-4s %-11s %-20s %-8s %-20s %s\n", k.KeyID, k.Environment, k.Role, k.Hint, state,
					stamp(k.ExpiresAt, "never"), stamp(k.LastUsedAt, "never"))
			}
			return nil
		}
	},
}

var keyRevokeCommand = &command{
	name: "key revoke", args: "--merchant M --key-id K",
	summary:  "revoke an API key: requests with it are refused from then on",
	database: true,
	required: []string{"merchant", "key-id"},
	define: func(fs *flag.FlagSet) runFunc {
		id := fs.String("merchant", "", "merchant id (required)")
		keyID := fs.String("key-id", "", "key id (required)")
		return func(ctx context.Context, inv *invocation) error {
			svc := service(inv.env)
			return operatorUpdate(ctx, inv.env, svc, *id, func(m merchant.State) ([]domain.Event, error) {
				return merchant.RevokeKey(m, *keyID, svc.Engine.Now())
			})
		}
	},
}
