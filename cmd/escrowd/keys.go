package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/escrowd/escrowd/internal/keyring"
)

// masterKeys reads the current master key (ESCROW_MASTER_KEY_FILE) and the
// previous ones named.
func masterKeys(cfg Config, previous ...string) (keyring.Master, []keyring.Master, error) {
	if cfg.MasterKeyFile == "" {
		return keyring.Master{}, nil, usageError("ESCROW_MASTER_KEY_FILE is not set: it names the master key file (32 random bytes, base64)")
	}
	current, err := keyring.LoadMaster(cfg.MasterKeyFile)
	if err != nil {
		return keyring.Master{}, nil, err
	}
	var prev []keyring.Master
	for _, p := range previous {
		m, err := keyring.LoadMaster(p)
		if err != nil {
			return keyring.Master{}, nil, err
		}
		prev = append(prev, m)
	}
	return current, prev, nil
}

var keysRotateMasterCommand = &command{
	name: "keys rotate-master", args: "--previous-key-file FILE",
	summary: "re-wrap every data key with the master key of ESCROW_MASTER_KEY_FILE; events are not touched",
	detail: "Make a new master key file (32 random bytes, base64, for example: head -c 32 /dev/urandom | base64),\n" +
		"point ESCROW_MASTER_KEY_FILE at it and name the one it replaces with --previous-key-file. Every\n" +
		"data key wrapped by the previous master is re-wrapped by the new one, a batch per transaction, so\n" +
		"the command may be run again after an interruption. What the data keys sealed is not touched.\n" +
		"Keep the previous file until the command reports no key left.",
	database: true,
	required: []string{"previous-key-file"},
	define: func(fs *flag.FlagSet) runFunc {
		previous := fs.String("previous-key-file", "", "the master key file being replaced (required)")
		return func(ctx context.Context, inv *invocation) error {
			current, prev, err := masterKeys(inv.cfg, *previous)
			if err != nil {
				return err
			}
			if prev[0].ID() == current.ID() {
				return usageError("--previous-key-file is the key ESCROW_MASTER_KEY_FILE names: nothing to re-wrap")
			}
			n, err := keyring.New(inv.env.Pool, current, prev...).RotateMaster(ctx)
			if err != nil {
				return fmt.Errorf("re-wrapped %d data keys, then: %w", n, err)
			}
			fmt.Fprintf(inv.stdout, "re-wrapped %d data keys with master key %s\n", n, current.ID())
			return nil
		}
	},
}
