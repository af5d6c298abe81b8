package main

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestProjectionsRetryAndSkip: `projections status` shows a parked event
// with the commands that clear it; `projections skip` moves the checkpoint
// past it and `projections retry` clears it in place; either refuses a read
// model that parked nothing, or one that does not exist.
func TestProjectionsRetryAndSkip(t *testing.T) {
	db := pgtest.NewURL(t)
	if _, err := cli(t, db, "merchant", "create", "--name", "Parked"); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	ctx := context.Background()
	parkAt := func(name string, commit, prepare int64) string {
		t.Helper()
		id := uuid.NewString()
		if _, err := env.Pool.Exec(ctx, `UPDATE projection_checkpoints
			SET parked_commit = $2, parked_prepare = $3, parked_event_id = $4, parked_event_type = 'category.created',
			    parked_stream = 'category-x', parked_error = 'a bug', parked_at = now() WHERE name = $1`, name, commit, prepare, id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var commit, prepare int64
	if err := env.Pool.QueryRow(ctx, `SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = 'categories'`).Scan(&commit, &prepare); err != nil {
		t.Fatal(err)
	}
	id := parkAt("categories", commit+1, 1)
	out, err := cli(t, db, "projections", "status")
	if err != nil || !strings.Contains(out, "PARKED at event "+id) || !strings.Contains(out, "escrowd projections retry|skip categories") {
		t.Fatalf("status with a parked event: %v\n%s", err, out)
	}
	if out, err = cli(t, db, "projections", "skip", "categories"); err != nil || !strings.Contains(out, "skipped event "+id) {
		t.Fatalf("skip: %v %s", err, out)
	}
	var c2, p2 int64
	if err := env.Pool.QueryRow(ctx, `SELECT commit_pos, prepare_pos FROM projection_checkpoints WHERE name = 'categories'`).Scan(&c2, &p2); err != nil || c2 != commit+1 || p2 != 1 {
		t.Fatalf("checkpoint after the skip %d/%d (%v), want %d/1", c2, p2, err, commit+1)
	}
	id = parkAt("customers", commit+5, 1)
	if out, err = cli(t, db, "projections", "retry", "customers"); err != nil || !strings.Contains(out, "retrying event "+id) {
		t.Fatalf("retry: %v %s", err, out)
	}
	for _, args := range [][]string{{"projections", "retry", "customers"}, {"projections", "skip", "nosuch"}} {
		if out, err := cli(t, db, args...); err == nil {
			t.Fatalf("%v: no error: %s", args, out)
		}
	}
}
