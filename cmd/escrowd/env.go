package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/wiring"
	"github.com/escrowd/escrowd/migrations"
	"github.com/escrowd/escrowd/projections"
)

// newLogger is the process's logger in the configured format, at that
// format's own level, or, quiet, at warn: a one-off command logs only what
// went wrong unless -v, so what it prints is its answer.
func newLogger(cfg Config, quiet bool) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.Sampling = nil
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
	}
	if quiet {
		zc.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	}
	return zc.Build()
}

func openPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if pc.MaxConns < 32 {
		pc.MaxConns = 32
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

func migrateDB(ctx context.Context, pool *pgxpool.Pool) error {
	return migrations.Up(ctx, pool)
}

// openEnv connects, migrates and opens the configured event store, behind
// the codec that seals personal and secret fields with the keyring of the
// master key ESCROW_MASTER_KEY_FILE names (required: without it nothing
// could be read or written as the log keeps it).
func openEnv(ctx context.Context, cfg Config, log *zap.Logger, stdout, stderr io.Writer) (*cliEnv, func(), error) {
	master, _, err := masterKeys(cfg)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := migrateDB(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	var store eventstore.Store
	switch cfg.EventStore {
	case "postgres":
		ps := postgres.New(pool)
		ps.AppendCalls = cfg.AppendCalls
		store = ps
	default:
		s, err := openKurrent(ctx, cfg)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		store = s
	}
	sealed, ring := wiring.Sealed(store, pool, master)
	env := &cliEnv{Pool: pool, Store: sealed, Raw: store, Keyring: ring, Log: log, Projectors: projections.All(wiring.Sealer(sealed)), Stdout: stdout, Stderr: stderr}
	return env, func() { store.Close(); pool.Close() }, nil
}

// queries reads the read models, opening their sealed values with the
// keys of the store's codec.
func (e *cliEnv) queries() *projections.Queries {
	return projections.NewQueries(e.Pool, e.sealer())
}

// sealer is the sealer of the read models' values (see projections.All).
func (e *cliEnv) sealer() domain.Sealer { return wiring.Sealer(e.Store) }
