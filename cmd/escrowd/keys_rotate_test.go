package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escrowd/escrowd/internal/keyring"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestKeysRotateMaster: `keys rotate-master` re-wraps the data keys of the
// previous master with ESCROW_MASTER_KEY_FILE's, after which what they
// sealed opens with the new master alone.
func TestKeysRotateMaster(t *testing.T) {
	db := pgtest.NewURL(t)
	dir := t.TempDir()
	oldFile, newFile := filepath.Join(dir, "old.key"), filepath.Join(dir, "new.key")
	for _, f := range []string{oldFile, newFile} {
		if err := keyring.CreateMasterFile(f); err != nil {
			t.Fatal(err)
		}
	}
	oldM, _ := keyring.LoadMaster(oldFile)
	newM, _ := keyring.LoadMaster(newFile)
	env := testEnv(t, db)
	ctx := context.Background()
	sealed, err := keyring.New(env.Pool, oldM).Seal(ctx, keyring.Customer("c_1"), []byte("22212345678"), []byte("bvn"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ESCROW_MASTER_KEY_FILE", "")
	os.Unsetenv("ESCROW_MASTER_KEY_FILE")
	if _, err := cli(t, db, "keys", "rotate-master", "--previous-key-file", oldFile); err == nil || !strings.Contains(err.Error(), "ESCROW_MASTER_KEY_FILE") {
		t.Fatalf("without a master key: %v", err)
	}
	t.Setenv("ESCROW_MASTER_KEY_FILE", oldFile)
	if _, err := cli(t, db, "keys", "rotate-master", "--previous-key-file", oldFile); err == nil || !strings.Contains(err.Error(), "nothing to re-wrap") {
		t.Fatalf("the same key twice: %v", err)
	}
	t.Setenv("ESCROW_MASTER_KEY_FILE", newFile)
	out, err := cli(t, db, "keys", "rotate-master", "--previous-key-file", oldFile)
	if err != nil || out != "re-wrapped 1 data keys with master key "+newM.ID()+"\n" {
		t.Fatalf("rotate-master: %v %q", err, out)
	}
	got, err := keyring.New(env.Pool, newM).Open(ctx, keyring.Customer("c_1"), sealed, []byte("bvn"))
	if err != nil || string(got) != "22212345678" {
		t.Fatalf("after the rotation: %q %v", got, err)
	}
}
