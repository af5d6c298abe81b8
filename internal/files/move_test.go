package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// oldFolder writes files as the store on disk kept them: owner folders,
// a file from before owners, an unfinished upload, something else.
func oldFolder(t *testing.T) (dir string, files map[string][]byte) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "files")
	files = map[string][]byte{
		nameIn(ownerA, "1", "png"): []byte("a png"),
		nameIn(ownerA, "2", "pdf"): []byte("%PDF a pdf"),
		nameIn(ownerB, "3", "jpg"): []byte("a jpeg"),
		nameIn(ownerB, "4", "gif"): []byte("a gif"),
		hexName(5) + ".webp":       []byte("a webp from before owners"),
	}
	for n, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for _, junk := range []string{ownerA + "/.upload-123", "notes.txt", "other/" + hexName(6) + ".png"} {
		p := filepath.Join(dir, filepath.FromSlash(junk))
		os.MkdirAll(filepath.Dir(p), 0o750)
		if err := os.WriteFile(p, []byte("junk"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

func inFolder(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
	return !errors.Is(err, fs.ErrNotExist)
}

// TestMoveVerifiesAndIsIdempotent: every file of the old folder ends in the
// store with its bytes, under the name it was served by, and leaves the
// folder; a name the store holds with other bytes is reported and both
// copies are kept; a second run moves nothing more and changes nothing.
func TestMoveVerifiesAndIsIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		dir, files := oldFolder(t)
		clash := nameIn(ownerB, "4", "gif")
		if err := b.Put(ctx, NewObject(clash, []byte("a different gif"))); err != nil {
			t.Fatal(err)
		}
		dry, err := Move(ctx, dir, b, true, nil)
		if err != nil || dry.Moved != len(files) || dry.Skipped != 3 {
			t.Fatalf("dry run: %+v, %v", dry, err)
		}
		for n := range files {
			if !inFolder(dir, n) {
				t.Fatalf("the dry run moved %s", n)
			}
		}
		m, err := Move(ctx, dir, b, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.Moved != len(files)-1 || !slices.Equal(m.Conflicts, []string{clash}) || m.Skipped != 3 {
			t.Fatalf("moved %+v", m)
		}
		for n, data := range files {
			o, err := b.Get(ctx, n)
			if err != nil {
				t.Fatalf("%s not in the store: %v", n, err)
			}
			if n == clash {
				if string(o.Data) != "a different gif" || !inFolder(dir, n) {
					t.Fatalf("the clash was overwritten or its copy removed")
				}
				continue
			}
			if !bytes.Equal(o.Data, data) || inFolder(dir, n) {
				t.Fatalf("%s: stored %q, still in the folder %v", n, o.Data, inFolder(dir, n))
			}
		}
		if !inFolder(dir, ownerA+"/.upload-123") || !inFolder(dir, "notes.txt") {
			t.Fatal("a move removed what is no stored file")
		}
		again, err := Move(ctx, dir, b, false, nil)
		if err != nil || again.Moved != 0 || len(again.Conflicts) != 1 {
			t.Fatalf("again: %+v, %v", again, err)
		}
	})
}

// TestMoveResumes: a move stopped part-way (the operator's ^C, a crash
// after a file was stored but before the folder's copy went) carries on
// when run again, and every file ends in the store once.
func TestMoveResumes(t *testing.T) {
	b := Postgres{Pool: newPool(t)}
	dir, files := oldFolder(t)
	// A crash after storing one file and before removing its copy.
	crashed := nameIn(ownerA, "1", "png")
	if err := b.Put(ctx, NewObject(crashed, files[crashed])); err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(ctx)
	moved := 0
	_, err := Move(stopped, dir, b, false, func(_, outcome string) {
		if outcome == "moved" {
			if moved++; moved == 2 {
				stop()
			}
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped move: %v", err)
	}
	m, err := Move(ctx, dir, b, false, nil)
	if err != nil || m.Moved != len(files)-2 {
		t.Fatalf("resumed: %+v, %v (first run moved %d)", m, err, moved)
	}
	for n, data := range files {
		o, err := b.Get(ctx, n)
		if err != nil || !bytes.Equal(o.Data, data) || inFolder(dir, n) {
			t.Fatalf("%s: %q, %v, in folder %v", n, o.Data, err, inFolder(dir, n))
		}
	}
}

// TestMoveRefusesBytesThatReadBackOther: a store that reads back other
// bytes than it took (a broken proxy, a bucket rewriting objects) keeps the
// folder's copy.
func TestMoveRefusesBytesThatReadBackOther(t *testing.T) {
	dir, files := oldFolder(t)
	b := corrupting{Postgres{Pool: newPool(t)}}
	if _, err := Move(ctx, dir, b, false, nil); err == nil {
		t.Fatal("a move trusted bytes that read back other")
	}
	left := 0
	for n := range files {
		if inFolder(dir, n) {
			left++
		}
	}
	if left != len(files) {
		t.Fatalf("%d of %d files left in the folder", left, len(files))
	}
}

// corrupting flips a byte of what it reads back.
type corrupting struct{ Postgres }

func (c corrupting) Get(ctx context.Context, name string) (Object, error) {
	o, err := c.Postgres.Get(ctx, name)
	if err == nil && len(o.Data) > 0 {
		o.Data = append([]byte{}, o.Data...)
		o.Data[0] ^= 0xff
	}
	return o, err
}

// TestCollectRemovesOnlyOldUnreferencedFiles: a file nothing refers to is
// removed once it is older than the cutoff; a referred-to one stays, a
// young one stays (its command may be about to refer to it), a dry run
// removes nothing, and the references are asked for after the listing.
func TestCollectRemovesOnlyOldUnreferencedFiles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		kept, orphan := nameIn(ownerA, "1", "png"), nameIn(ownerA, "2", "png")
		foreign := "backups/escrowd.dump" // something else in a shared bucket
		for _, n := range []string{kept, orphan, foreign} {
			if err := b.Put(ctx, NewObject(n, []byte(n))); err != nil {
				t.Fatal(err)
			}
		}
		cutoff := time.Now().Add(time.Minute)
		young := nameIn(ownerB, "3", "png")
		refs := func(context.Context) (References, error) {
			// Stored after the listing: not considered, whatever its age.
			if err := b.Put(ctx, NewObject(young, []byte("young"))); err != nil {
				return nil, err
			}
			s := NameSet{}
			s.AddURL("https://old-host.example/files/" + kept)
			return s, nil
		}
		var seen []string
		dry, err := Collect(ctx, b, cutoff, refs, true, func(i Info) { seen = append(seen, i.Name) })
		if err != nil || dry.Orphans != 1 || !slices.Equal(seen, []string{orphan}) {
			t.Fatalf("dry run: %+v %v, %v", dry, seen, err)
		}
		if _, err := b.Get(ctx, orphan); err != nil {
			t.Fatalf("the dry run removed the orphan: %v", err)
		}
		c, err := Collect(ctx, b, time.Now().Add(-time.Hour), refs, false, nil)
		if err != nil || c.Checked != 0 || c.Orphans != 0 {
			t.Fatalf("with every file younger than the cutoff: %+v, %v", c, err)
		}
		c, err = Collect(ctx, b, cutoff, refs, false, nil)
		if err != nil || c.Orphans != 2 || c.Checked != 3 {
			// the young file is now listed and, unreferred, collected
			t.Fatalf("collect: %+v, %v", c, err)
		}
		if _, err := b.Get(ctx, orphan); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the orphan is still stored: %v", err)
		}
		if _, err := b.Get(ctx, kept); err != nil {
			t.Fatalf("a referred-to file was collected: %v", err)
		}
		if _, err := b.Get(ctx, foreign); err != nil {
			t.Fatalf("an object the service never stored was collected: %v", err)
		}
	})
}

// TestNameSetAddURL: the name of a file URL, whatever its host; nothing of
// other URLs.
func TestNameSetAddURL(t *testing.T) {
	name := nameIn(ownerA, "a", "png")
	s := NameSet{}
	for _, u := range []string{"http://localhost:8080/files/" + name, "https://elsewhere.example/img.png",
		"https://x.example/files/../etc/passwd", "not a url %%", "https://x.example/files/" + hexName(7) + ".gif"} {
		s.AddURL(u)
	}
	if len(s) != 2 || !s.Has(name) || !s.Has(hexName(7)+".gif") {
		t.Fatalf("names %v", s)
	}
}

// TestServeFolder: a file still in the old folder is served until it is
// moved, and removed from the folder with its escrow; a name is never a
// path out of the folder.
func TestServeFolder(t *testing.T) {
	dir, files := oldFolder(t)
	s := newStore(t)
	s.ServeFolder(dir)
	name := nameIn(ownerA, "1", "png")
	f, ct, _, err := s.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, files[name]) || ct != "image/png" {
		t.Fatalf("served %q as %s", got, ct)
	}
	for _, bad := range []string{"notes.txt", ownerA + "/.upload-123", "other/" + hexName(6) + ".png", "../files/" + name} {
		if _, _, _, err := s.Open(ctx, bad); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	if err := s.Remove(ctx, []string{testURL + "/files/" + name}); err != nil {
		t.Fatal(err)
	}
	if inFolder(dir, name) {
		t.Fatal("a removed file is still in the folder")
	}
	if _, _, _, err := s.Open(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a removed file is served: %v", err)
	}
	// Once moved, the store's copy is served.
	moved := nameIn(ownerB, "3", "jpg")
	if _, err := Move(ctx, dir, s.Backend(), false, nil); err != nil {
		t.Fatal(err)
	}
	f, _, _, err = s.Open(ctx, moved)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, files[moved]) || inFolder(dir, moved) {
		t.Fatalf("after the move: %q, in folder %v", got, inFolder(dir, moved))
	}
}
