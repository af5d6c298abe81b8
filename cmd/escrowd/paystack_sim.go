package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/escrowd/escrowd/internal/paystack/paystacksim"
)

var paystackSimCommand = &command{
	name:    "paystack-sim",
	args:    "[--addr 127.0.0.1:7070] [--secret-key sk_test_...] [--webhook-url URL] [--settle success|failed|reversed|manual]",
	summary: "a local Paystack simulator, for trying escrowd without a Paystack account",
	detail: `Answers Paystack's API (customers, dedicated accounts, transactions,
transfers, banks, account resolution) on this machine and posts signed
events to --webhook-url, which must be on this machine too. Point escrowd at
it with ESCROW_PROVIDER_TEST=paystack, ESCROW_PAYSTACK_BASE_URL=<its URL> and
the same test key in ESCROW_PAYSTACK_SECRET_KEY_TEST.

A payer completes a card, bank or USSD payment on the page of its
authorization URL. Transfers answer pending and settle as --settle says
after --settle-after (manual: only through the control API). The control
API, under /_sim/ with the same key as a bearer token, pays into a
dedicated account (POST /_sim/dedicated-account-payments
{"account_number","amount"}), settles transfers, injects faults, and lists
what happened (GET /_sim/events, /_sim/transactions, /_sim/transfers).`,
	define: func(fs *flag.FlagSet) runFunc {
		addr := fs.String("addr", "127.0.0.1:7070", "loopback address to listen on")
		key := fs.String("secret-key", "", "test secret key clients must send (default ESCROW_PAYSTACK_SECRET_KEY_TEST)")
		hook := fs.String("webhook-url", "", "loopback URL to post events to, e.g. http://127.0.0.1:8080/hooks/paystack/test")
		settle := fs.String("settle", "success", "how transfers end by themselves: success, failed, reversed or manual")
		after := fs.Duration("settle-after", 2*time.Second, "how long a transfer stays pending before it settles")
		return func(ctx context.Context, inv *invocation) error {
			secret := *key
			if secret == "" {
				secret = os.Getenv("ESCROW_PAYSTACK_SECRET_KEY_TEST")
			}
			return runPaystackSim(ctx, inv.stdout, inv.stderr, paystackSimOptions{addr: *addr, secret: secret,
				webhook: *hook, settle: *settle, after: *after})
		}
	},
}

type paystackSimOptions struct {
	addr, secret, webhook, settle string
	after                         time.Duration
}

// runPaystackSim serves the simulator until ctx ends.
func runPaystackSim(ctx context.Context, stdout, stderr io.Writer, o paystackSimOptions) error {
	switch {
	case o.secret == "":
		return usageError("paystack-sim: a test secret key is required (--secret-key or ESCROW_PAYSTACK_SECRET_KEY_TEST)")
	case strings.HasPrefix(o.secret, "sk_live_"):
		// Nothing here reaches Paystack, but a live key on a command line
		// is a live key in the shell history and the process list.
		return usageError("paystack-sim: give it a test key (sk_test_...), never a live one")
	}
	status := o.settle
	if status == "manual" {
		status = ""
	}
	sim, err := paystacksim.Start(paystacksim.Config{SecretKey: o.secret, WebhookURL: o.webhook, Addr: o.addr,
		SettleAfter: o.after, Logger: slog.New(slog.NewTextHandler(stderr, nil))})
	if err != nil {
		return err
	}
	defer sim.Close()
	if err := sim.AutoSettleTransfers(status, o.after); err != nil {
		return usageError("paystack-sim: --settle: " + err.Error())
	}
	events := o.webhook
	if events == "" {
		events = "nowhere (no --webhook-url)"
	}
	fmt.Fprintf(stdout, "Paystack simulator on %s (key %s); events to %s; Ctrl-C stops\n", sim.URL, maskKey(o.secret), events)
	fmt.Fprintf(stdout, "  escrowd: ESCROW_PROVIDER_TEST=paystack ESCROW_PAYSTACK_BASE_URL=%s and the same key in ESCROW_PAYSTACK_SECRET_KEY_TEST\n", sim.URL)
	<-ctx.Done()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// maskKey shows a key's kind and last four characters.
func maskKey(k string) string {
	if len(k) <= 12 {
		return "…"
	}
	return k[:8] + "…" + k[len(k)-4:]
}
