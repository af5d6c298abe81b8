// Command escrowd is the service and its operator tools in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
)

// cliEnv is what every subcommand gets: an open database, the event store,
// a logger and the read-model projectors.
type cliEnv struct {
	Pool       *pgxpool.Pool
	Store      eventstore.Store
	Log        *zap.Logger
	Projectors []projections.Projector
	Stdout     io.Writer
	Stderr     io.Writer
}

const usage = `escrowd: self-hostable merchant escrow and payments service

Usage:
  escrowd serve [--role api,projector,webhooks]   run the HTTP API, projectors and webhook dispatcher
  escrowd migrate                                   apply database migrations
  escrowd merchant create --name N [--business] [--country NG] [--json]
  escrowd merchant set-webhook --merchant M --env test|live --url URL
  escrowd merchant set-allowlist --merchant M --ips 1.2.3.4,10.0.0.0/8   (live only; empty clears)
  escrowd merchant set-fees --merchant M [--escrow-fee-bps 250] [--commission-bps 5000] ...
  escrowd merchant rotate-secret --merchant M --env test|live
  escrowd key create --merchant M --env test|live [--role standard|super_admin]
  escrowd key revoke --merchant M --key-id K
  escrowd projections status [--json]              read models and the webhook subscriber: checkpoint, lag
  escrowd projections rebuild [NAME]                read models only (never the webhook subscriber)
  escrowd audit --merchant M [--json]               replay and check a merchant's money (exit 1 on any difference)
  escrowd events export --merchant M [--from T] [--to T] [--type T] [--secrets]
                                                    the merchant's events as JSON lines (credentials redacted)
  escrowd events copy --to kurrent [--url URL] [--switch]
                                                    copy the PostgreSQL event log to KurrentDB, streams and
                                                    revisions, and check it; --switch moves the checkpoints
  escrowd demo                                      create (once) and print a demo merchant
  escrowd webhooks listen [--port 9000] [--secret S] [--body]   a local receiver that verifies and prints webhooks

Configuration comes from environment variables (see README): DATABASE_URL,
ESCROW_ADDR, ESCROW_HOSTS, ESCROW_DEFAULT_ENVIRONMENT, ESCROW_RATE_LIMIT_PER_MINUTE, ...
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, err)
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "escrowd:", err)
		os.Exit(1)
	}
}

type usageError string

func (u usageError) Error() string { return string(u) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if args[0] == "webhooks" { // needs no database
		return cmdWebhooks(ctx, args[1:], stdout, stderr)
	}
	cfg, err := LoadConfig()
	if err != nil {
		return err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	if args[0] == "migrate" {
		pool, err := openPool(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		return migrateDB(ctx, pool)
	}
	env, closeEnv, err := openEnv(ctx, cfg, log, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeEnv()
	switch args[0] {
	case "serve":
		return cmdServe(ctx, cfg, env, args[1:])
	case "merchant":
		return cmdMerchant(ctx, cfg, env, args[1:])
	case "key":
		return cmdKey(ctx, cfg, env, args[1:])
	case "projections":
		return cmdProjections(ctx, env, args[1:])
	case "audit":
		return cmdAudit(ctx, env, args[1:])
	case "events":
		return cmdEvents(ctx, env, args[1:])
	case "demo":
		return cmdDemo(ctx, cfg, env, args[1:])
	default:
		return usageError("unknown command " + args[0])
	}
}
