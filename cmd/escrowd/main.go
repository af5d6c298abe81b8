// Command escrowd is the service and its operator tools in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/projections"
)

// cliEnv is what every subcommand gets: an open database, the event store,
// a logger and the read-model projectors.
type cliEnv struct {
	Pool *pgxpool.Pool
	// Store seals and opens personal and secret fields; Raw is the store
	// under it, whose events keep them sealed (for copying the log as it
	// is), Keyring the data keys.
	Store      eventstore.Store
	Raw        eventstore.Store
	Keyring    *keyring.Keyring
	Log        *zap.Logger
	Projectors []projections.Projector
	Stdout     io.Writer
	Stderr     io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runIO(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		var cu commandUsage
		if errors.As(err, &cu) {
			fmt.Fprintf(os.Stderr, "escrowd: %v\n\n%s", err, cu.usage)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "escrowd:", err)
		os.Exit(1)
	}
}

var migrateCommand = &command{
	name: "migrate", summary: "apply database migrations (serve and every command also do)",
	database: true, poolOnly: true,
	define: func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, inv *invocation) error { return migrateDB(ctx, inv.env.Pool) }
	},
}
