package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/escrowd/escrowd/internal/files"
	"github.com/escrowd/escrowd/projections"
)

// openFiles is the file store cfg names (ESCROW_FILE_STORE).
func openFiles(cfg Config, env *cliEnv) (files.Backend, error) {
	if cfg.FileStore != "s3" {
		return files.Postgres{Pool: env.Pool}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return files.NewS3(ctx, files.S3Config{Endpoint: cfg.S3.Endpoint, Bucket: cfg.S3.Bucket, Region: cfg.S3.Region,
		AccessKey: cfg.S3.AccessKey, SecretKey: string(cfg.S3.SecretKey)})
}

// collectMinAge is how old a file must be to be collected: a file is
// stored before the command that refers to it is appended, a moment later
// (an hour covers any request).
const collectMinAge = time.Hour

// collectEvery is how often serve collects orphan files.
const collectEvery = 6 * time.Hour

// fileReferences answers which stored files live records refer to, from
// the read models once they include every event appended before the call:
// it catches them up to the log's head (or waits for the process that
// runs them), so no command that kept a file is missed. A read model that
// cannot get there (a parked event, a long transaction) fails the call:
// nothing is collected on records that may be behind.
func fileReferences(env *cliEnv) func(context.Context) (files.References, error) {
	return func(ctx context.Context) (files.References, error) {
		head, err := env.Store.Last(ctx)
		if err != nil {
			return nil, err
		}
		var ps []projections.Projector
		for _, p := range env.Projectors {
			for _, n := range projections.FileReferencesNames {
				if p.Name() == n {
					ps = append(ps, p)
				}
			}
		}
		if len(ps) != len(projections.FileReferencesNames) {
			return nil, fmt.Errorf("the read models %v are not all configured", projections.FileReferencesNames)
		}
		if err := projections.CatchUpTo(ctx, env.Store, env.Pool, env.Log, head, ps...); err != nil {
			return nil, err
		}
		set := files.NameSet{}
		if err := env.queries().FileReferences(ctx, set.AddURL); err != nil {
			return nil, err
		}
		return set, nil
	}
}

// collectFiles is one orphan collection over backend.
func collectFiles(ctx context.Context, env *cliEnv, backend files.Backend, minAge time.Duration, dryRun bool, each files.CollectEach) (files.Collected, error) {
	return files.Collect(ctx, backend, time.Now().Add(-minAge), fileReferences(env), dryRun, each)
}

// runFileCollection collects orphan files first after wait and then every
// every, until ctx ends; a failed round is logged and the next one tries
// again. serve runs it with a few minutes' first wait (spread at random, so
// instances started together do not collect together) and collectEvery.
func runFileCollection(ctx context.Context, env *cliEnv, backend files.Backend, wait, every time.Duration) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = every
		c, err := collectFiles(ctx, env, backend, collectMinAge, false, nil)
		if err != nil {
			if ctx.Err() == nil {
				env.Log.Warn("files: orphan collection failed; the next round tries again", zap.Error(err))
			}
			continue
		}
		env.Log.Info("files: orphans collected", zap.Int("checked", c.Checked), zap.Int("removed", c.Orphans), zap.Int64("bytes", c.Bytes))
	}
}

var filesMoveCommand = &command{
	name: "files move", args: "[--from DIR] [--dry-run]",
	summary: "move uploaded files from the data directory into the file store",
	detail: `Files uploaded before the file store (ESCROW_FILE_STORE) were kept under
<ESCROW_DATA_DIR>/files on one instance's disk. Each is stored under the name
it was served by, read back and compared by SHA-256, and only then removed
from the directory. Safe to stop and run again (it carries on), and while
servers run. A name the store already holds with other bytes is reported and
both copies are kept. Run it on every machine that kept files.`,
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		from := fs.String("from", "", "the folder of files (default <ESCROW_DATA_DIR>/files)")
		dryRun := fs.Bool("dry-run", false, "report what would be moved; change nothing")
		return func(ctx context.Context, inv *invocation) error {
			dir := *from
			if dir == "" {
				dir = oldFilesFolder(inv.cfg)
			}
			if dir == "" {
				return usageError("no data directory: name the folder with --from")
			}
			backend, err := openFiles(inv.cfg, inv.env)
			if err != nil {
				return err
			}
			m, err := files.Move(ctx, dir, backend, *dryRun, func(name, outcome string) {
				if outcome == "conflict" {
					fmt.Fprintf(inv.env.Stdout, "conflict: %s is stored with other bytes; kept in %s\n", name, dir)
				}
			})
			verb := "moved"
			if *dryRun {
				verb = "would move"
			}
			fmt.Fprintf(inv.env.Stdout, "%s %d files (%d bytes) from %s; %d conflicts, %d entries that are no stored file left alone\n",
				verb, m.Moved, m.Bytes, dir, len(m.Conflicts), m.Skipped)
			if err != nil {
				return err
			}
			if len(m.Conflicts) > 0 {
				return fmt.Errorf("%d files were not moved (conflicts above)", len(m.Conflicts))
			}
			return nil
		}
	},
}

var filesCollectCommand = &command{
	name: "files collect", args: "[--dry-run] [--min-age 1h]",
	summary: "remove stored files nothing refers to (serve does it every 6 hours)",
	detail: `A stored file is an orphan when no escrow or category that is not deleted
shows it: the files of deleted and expired escrows, replaced category images,
uploads whose request failed part-way. The read models are caught up with
the log first (or waited for, when a server runs them); if they cannot be,
nothing is removed. Only files older than --min-age are considered: a file is
stored a moment before the request that refers to it is recorded.`,
	database: true,
	define: func(fs *flag.FlagSet) runFunc {
		dryRun := fs.Bool("dry-run", false, "list the orphans; remove nothing")
		minAge := fs.Duration("min-age", collectMinAge, "consider only files stored longer ago than this")
		return func(ctx context.Context, inv *invocation) error {
			if *minAge < 0 {
				return usageError("--min-age must not be negative")
			}
			backend, err := openFiles(inv.cfg, inv.env)
			if err != nil {
				return err
			}
			c, err := collectFiles(ctx, inv.env, backend, *minAge, *dryRun, func(i files.Info) {
				fmt.Fprintf(inv.env.Stdout, "orphan: %s (%d bytes, stored %s)\n", i.Name, i.Size, i.Created.UTC().Format(time.RFC3339))
			})
			if err != nil {
				return err
			}
			verb := "removed"
			if *dryRun {
				verb = "would remove"
			}
			_, err = fmt.Fprintf(inv.env.Stdout, "checked %d files; %s %d orphans (%d bytes)\n", c.Checked, verb, c.Orphans, c.Bytes)
			return err
		}
	},
}
