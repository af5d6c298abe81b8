package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/domain/escrow"
	"github.com/escrowd/escrowd/domain/money"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/files"
	"github.com/escrowd/escrowd/internal/pgtest"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// storedName is a name the file store hands out, of owner, ending in digit.
func storedName(owner, digit string) string {
	return owner + "/" + strings.Repeat(digit, 32) + ".png"
}

// TestFilesCollectWaitsForReadModels: `files collect` removes the files of
// a deleted escrow and files nothing refers to, and keeps a live escrow's,
// although no read model has applied any of those escrows when it starts
// (no server runs): it catches the read models up with the log before it
// decides anything is an orphan. A dry run lists the same orphans and
// removes nothing.
func TestFilesCollectWaitsForReadModels(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	out, err := cli(t, db, "merchant", "create", "--name", "Files", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		MerchantID string `json:"merchantId"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, db)
	backend := files.Postgres{Pool: env.Pool}
	owner := files.Owner(m.MerchantID, string(domain.Test))
	kept, ofDeleted, orphan := storedName(owner, "1"), storedName(owner, "2"), storedName(owner, "3")
	for _, n := range []string{kept, ofDeleted, orphan} {
		if err := backend.Put(ctx, files.NewObject(n, []byte("image "+n))); err != nil {
			t.Fatal(err)
		}
	}
	svc := app.NewService(app.NewEngine(env.Store, 100))
	a := app.Actor{MerchantID: m.MerchantID, Environment: domain.Test, KeyID: "k"}
	seller, _, err := svc.CreateCustomer(ctx, a, customer.NewCustomer{Firstname: "Ada", Lastname: "Obi", Email: "ada@x.co", Phone: "08031110009"})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string {
		t.Helper()
		res, err := svc.CreateEscrow(ctx, a, seller, escrow.Draft{Amount: money.Naira(1000), Purpose: "Phone", WhoPays: "buyer",
			ImageURLs: []string{"http://localhost:8080/files/" + name}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Escrow.ID
	}
	create(kept)
	gone := create(ofDeleted)
	if _, err := svc.DeleteEscrow(ctx, a, seller, gone); err != nil {
		t.Fatal(err)
	}

	out, err = cli(t, db, "files", "collect", "--dry-run", "--min-age", "0s")
	if err != nil || !strings.Contains(out, "would remove 2 orphans") || !strings.Contains(out, "orphan: "+ofDeleted) ||
		!strings.Contains(out, "orphan: "+orphan) || strings.Contains(out, kept) {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, n := range []string{kept, ofDeleted, orphan} {
		if _, err := backend.Get(ctx, n); err != nil {
			t.Fatalf("the dry run removed %s: %v", n, err)
		}
	}
	if out, err = cli(t, db, "files", "collect", "--min-age", "0s"); err != nil || !strings.Contains(out, "checked 3 files; removed 2 orphans") {
		t.Fatalf("collect: %v\n%s", err, out)
	}
	if _, err := backend.Get(ctx, kept); err != nil {
		t.Fatalf("a live escrow's image was collected: %v", err)
	}
	for _, n := range []string{ofDeleted, orphan} {
		if _, err := backend.Get(ctx, n); !errors.Is(err, files.ErrNotFound) {
			t.Fatalf("%s is still stored: %v", n, err)
		}
	}
	// Files younger than --min-age (default an hour) are never considered.
	if err := backend.Put(ctx, files.NewObject(orphan, []byte("young"))); err != nil {
		t.Fatal(err)
	}
	if out, err = cli(t, db, "files", "collect"); err != nil || !strings.Contains(out, "checked 0 files; removed 0 orphans") {
		t.Fatalf("collect of young files: %v\n%s", err, out)
	}
}

// TestFilesMove: `files move` carries a data directory's files into the
// store, verified, and a second run finds nothing more to move.
func TestFilesMove(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	dir := t.TempDir()
	owner := files.Owner("m", "test")
	name := storedName(owner, "a")
	if err := os.MkdirAll(filepath.Join(dir, owner), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte("an image"), 0o640); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, db, "files", "move", "--from", dir, "--dry-run")
	if err != nil || !strings.Contains(out, "would move 1 files (8 bytes)") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if out, err = cli(t, db, "files", "move", "--from", dir); err != nil || !strings.Contains(out, "moved 1 files (8 bytes)") {
		t.Fatalf("move: %v\n%s", err, out)
	}
	o, err := files.Postgres{Pool: testEnv(t, db).Pool}.Get(ctx, name)
	if err != nil || string(o.Data) != "an image" {
		t.Fatalf("stored %q, %v", o.Data, err)
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the folder's copy is still there: %v", err)
	}
	if out, err = cli(t, db, "files", "move", "--from", dir); err != nil || !strings.Contains(out, "moved 0 files") {
		t.Fatalf("again: %v\n%s", err, out)
	}
}

// TestFilesMoveIntoS3: with ESCROW_FILE_STORE=s3 the commands use the
// bucket (an in-process S3 server on loopback).
func TestFilesMoveIntoS3(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewURL(t)
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	client, err := minio.New(strings.TrimPrefix(srv.URL, "http://"), &minio.Options{Creds: credentials.NewStaticV4("AK", "SK", ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.MakeBucket(ctx, "escrowd", minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"ESCROW_FILE_STORE": "s3", "ESCROW_S3_ENDPOINT": srv.URL, "ESCROW_S3_BUCKET": "escrowd",
		"ESCROW_S3_ACCESS_KEY": "AK", "ESCROW_S3_SECRET_KEY": "SK"} {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	name := storedName(files.Owner("m", "test"), "b")
	os.MkdirAll(filepath.Join(dir, filepath.Dir(filepath.FromSlash(name))), 0o750)
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte("in the bucket"), 0o640); err != nil {
		t.Fatal(err)
	}
	if out, err := cli(t, db, "files", "move", "--from", dir); err != nil || !strings.Contains(out, "moved 1 files") {
		t.Fatalf("move: %v\n%s", err, out)
	}
	obj, err := client.GetObject(ctx, "escrowd", name, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil || string(got) != "in the bucket" {
		t.Fatalf("the bucket holds %q (%v)", got, err)
	}
	var rows int
	if err := testEnv(t, db).Pool.QueryRow(ctx, `SELECT count(*) FROM stored_files`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d files in the database (%v), want none", rows, err)
	}
}

// TestServeCollectsOrphans: the collection serve runs removes an orphan by
// itself, and stops when serve does.
func TestServeCollectsOrphans(t *testing.T) {
	db := pgtest.NewURL(t)
	env := testEnv(t, db)
	backend := files.Postgres{Pool: env.Pool}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orphan := storedName(files.Owner("m", "test"), "4")
	if err := backend.Put(ctx, files.NewObject(orphan, []byte("orphan"))); err != nil {
		t.Fatal(err)
	}
	// min-age is an hour: make the file old enough.
	if _, err := env.Pool.Exec(ctx, `UPDATE stored_files SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runFileCollection(ctx, env, backend, 0, 10*time.Millisecond) }()
	for {
		_, err := backend.Get(ctx, orphan)
		if errors.Is(err, files.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the collection stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped with %v", err)
	}
}
