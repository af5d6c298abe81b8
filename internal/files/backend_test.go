package files

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/escrowd/escrowd/internal/pgtest"
)

// backends are the adapters every contract test runs against: each a fresh,
// empty store.
var backends = []struct {
	name string
	open func(t *testing.T) Backend
}{
	{"postgres", func(t *testing.T) Backend { return Postgres{Pool: pgtest.NewPool(t)} }},
	{"s3", newS3},
}

// newS3 is an S3 adapter over an in-process S3 server on loopback
// (httptest listens on 127.0.0.1), with a bucket of its own.
func newS3(t *testing.T) Backend {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	cfg := S3Config{Endpoint: srv.URL, Bucket: "escrowd-files", Region: "us-east-1", AccessKey: "test", SecretKey: "test-secret"}
	if _, err := NewS3(ctx, cfg); err == nil {
		t.Fatal("opened a bucket that does not exist")
	}
	raw, err := newS3Client(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.MakeBucket(ctx, cfg.Bucket, minioMakeBucket()); err != nil {
		t.Fatal(err)
	}
	b, err := NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func forEachBackend(t *testing.T, test func(t *testing.T, b Backend)) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) { test(t, bk.open(t)) })
	}
}

const (
	ownerA = "0123456789abcdef"
	ownerB = "fedcba9876543210"
)

func nameIn(owner, hexDigit, ext string) string {
	n := ""
	for range 32 {
		n += hexDigit
	}
	return owner + "/" + n + "." + ext
}

// TestBackendContract: what the Store relies on, the same of every
// adapter: Put, Get and Delete by name, a repeated Put of the same bytes is
// harmless and of other bytes refused without overwriting, usage per owner,
// and a listing in name order with sizes and times.
func TestBackendContract(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		began := time.Now().Add(-time.Minute) // S3 times have a second's precision
		a1, a2, b1 := nameIn(ownerA, "1", "png"), nameIn(ownerA, "2", "pdf"), nameIn(ownerB, "3", "jpg")
		data := map[string][]byte{a1: []byte("first file"), a2: []byte("%PDF-1.4 second"), b1: []byte("third, of another owner")}
		for _, n := range []string{b1, a2, a1} {
			if err := b.Put(ctx, NewObject(n, data[n])); err != nil {
				t.Fatalf("put %s: %v", n, err)
			}
		}
		if err := b.Put(ctx, NewObject(a1, data[a1])); err != nil {
			t.Fatalf("a repeated put of the same bytes: %v", err)
		}
		if err := b.Put(ctx, NewObject(a1, []byte("other bytes"))); !errors.Is(err, ErrExists) {
			t.Fatalf("a put of other bytes: %v, want ErrExists", err)
		}
		for n, want := range data {
			o, err := b.Get(ctx, n)
			if err != nil {
				t.Fatalf("get %s: %v", n, err)
			}
			if string(o.Data) != string(want) || o.Size != int64(len(want)) || o.SHA256 != sha256.Sum256(want) || o.Name != n {
				t.Fatalf("get %s: %q (%d bytes, name %s)", n, o.Data, o.Size, o.Name)
			}
			if o.Created.Before(began) || o.Created.After(time.Now().Add(time.Minute)) {
				t.Fatalf("get %s: created %v", n, o.Created)
			}
		}
		if _, err := b.Get(ctx, nameIn(ownerA, "9", "png")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get of a missing name: %v", err)
		}
		if u, err := b.Usage(ctx, ownerA); err != nil || u != int64(len(data[a1])+len(data[a2])) {
			t.Fatalf("usage of A: %d, %v", u, err)
		}
		if u, err := b.Usage(ctx, "00000000000000ff"); err != nil || u != 0 {
			t.Fatalf("usage of nobody: %d, %v", u, err)
		}
		var listed []Info
		if err := b.List(ctx, func(i Info) error { listed = append(listed, i); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 3 || listed[0].Name != a1 || listed[1].Name != a2 || listed[2].Name != b1 {
			t.Fatalf("listed %v", listed)
		}
		for _, i := range listed {
			if i.Size != int64(len(data[i.Name])) || i.Created.Before(began) {
				t.Fatalf("listed %+v", i)
			}
		}
		stop := errors.New("stop")
		seen := 0
		if err := b.List(ctx, func(Info) error { seen++; return stop }); !errors.Is(err, stop) || seen != 1 {
			t.Fatalf("a listing fn stops it: %v after %d", err, seen)
		}
		if n, err := b.Delete(ctx, a1); err != nil || n != int64(len(data[a1])) {
			t.Fatalf("delete: %d, %v", n, err)
		}
		if n, err := b.Delete(ctx, a1); err != nil || n != 0 {
			t.Fatalf("delete again: %d, %v", n, err)
		}
		if _, err := b.Get(ctx, a1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if u, err := b.Usage(ctx, ownerA); err != nil || u != int64(len(data[a2])) {
			t.Fatalf("usage after delete: %d, %v", u, err)
		}
		if err := b.Put(ctx, NewObject(a1, []byte("other bytes"))); err != nil {
			t.Fatalf("a put after delete: %v", err)
		}
	})
}

// TestBackendListsPastAPage: a listing goes past one query's page.
func TestBackendListsPastAPage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		const n = listPage + 7
		for i := range n {
			name := ownerA + "/" + hexName(i) + ".png"
			if err := b.Put(ctx, NewObject(name, []byte{byte(i)})); err != nil {
				t.Fatal(err)
			}
		}
		count, last := 0, ""
		err := b.List(ctx, func(i Info) error {
			if i.Name <= last {
				t.Fatalf("%s listed after %s", i.Name, last)
			}
			last = i.Name
			count++
			return nil
		})
		if err != nil || count != n {
			t.Fatalf("listed %d of %d: %v", count, n, err)
		}
	})
}

func hexName(i int) string {
	const digits = "0123456789abcdef"
	b := []byte("00000000000000000000000000000000")
	for p := len(b) - 1; i > 0; p-- {
		b[p] = digits[i%16]
		i /= 16
	}
	return string(b)
}
