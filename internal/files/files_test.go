package files

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"mime/multipart"
	"net/textproto"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
)

const testURL = "https://files.example.test"

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(t.TempDir(), testURL+"/", 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tiny() image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	return img
}

func pngBytes(t *testing.T) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, tiny()); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func jpegBytes(t *testing.T) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, tiny(), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gifBytes(t *testing.T) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, tiny(), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// webpBytes is a complete 1x1 lossless WebP: RIFF header, VP8L chunk.
func webpBytes() []byte {
	return []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00" +
		"\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")
}

type upload struct {
	name, contentType string
	data              []byte
}

// form builds the file headers a real multipart parse produces.
func form(t *testing.T, ups ...upload) []*multipart.FileHeader {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for _, u := range ups {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="imageUrl"; filename="`+u.name+`"`)
		h.Set("Content-Type", u.contentType)
		p, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		p.Write(u.data)
	}
	w.Close()
	f, err := multipart.NewReader(&body, w.Boundary()).ReadForm(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.RemoveAll() })
	return f.File["imageUrl"]
}

func stored(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.dir, testOwner))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

var urlShape = regexp.MustCompile(`^` + regexp.QuoteMeta(testURL) + `/files/[0-9a-f]{16}/([0-9a-f]{32})\.(png|jpg|webp|gif)$`)

func nameOf(t *testing.T, url string) string {
	t.Helper()
	if !urlShape.MatchString(url) {
		t.Fatalf("url %q has the wrong shape", url)
	}
	return strings.TrimPrefix(url, testURL+"/files/")
}

func wantErr(t *testing.T, err error, code domain.Code, msg string) {
	t.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != code || de.Message != msg {
		t.Fatalf("got %v, want %s %q", err, code, msg)
	}
}

func TestWebPFixtureIsWellFormed(t *testing.T) {
	b := webpBytes()
	riff := int(b[4]) | int(b[5])<<8
	chunk := int(b[16]) | int(b[17])<<8
	if riff != len(b)-8 || 20+chunk+chunk%2 != len(b) {
		t.Fatalf("riff %d chunk %d len %d", riff, chunk, len(b))
	}
}

func TestNewCreatesDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	if _, err := New(root, testURL, 0); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, "files"))
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o750 {
		t.Fatalf("files dir: %v %v", st, err)
	}
}

func TestSaveImagesAcceptsEachTypeByContent(t *testing.T) {
	s := newStore(t)
	cases := []struct {
		data     []byte
		ext, typ string
	}{
		{pngBytes(t), "png", "image/png"},
		{jpegBytes(t), "jpg", "image/jpeg"},
		{gifBytes(t), "gif", "image/gif"},
		{webpBytes(), "webp", "image/webp"},
	}
	for _, c := range cases {
		// The client's filename and type are lies; only the bytes count.
		urls, err := s.SaveImages(testOwner, form(t, upload{"upload.txt", "text/plain", c.data}))
		if err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		if len(urls) != 1 || !strings.HasSuffix(urls[0], "."+c.ext) {
			t.Fatalf("%s: urls %v", c.typ, urls)
		}
		f, ct, mod, err := s.Open(nameOf(t, urls[0]))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if ct != c.typ || !bytes.Equal(got, c.data) || mod.IsZero() {
			t.Fatalf("%s: served %s, %d bytes, mod %v", c.typ, ct, len(got), mod)
		}
	}
	for _, n := range stored(t, s) {
		if strings.HasPrefix(n, ".upload-") {
			t.Fatalf("temp file left behind: %s", n)
		}
	}
}

func TestSaveImagesRefusesNonImages(t *testing.T) {
	s := newStore(t)
	for _, data := range [][]byte{
		[]byte("just some text, not a picture"),
		{},
		[]byte("RIFF\x00\x00\x00\x00WAVEfmt "),
		[]byte("%PDF-1.4\n"),
	} {
		_, err := s.SaveImages(testOwner, form(t, upload{"x.png", "image/png", data}))
		wantErr(t, err, domain.Invalid, "imageUrl must be PNG, JPEG, WebP or GIF images")
	}
	if n := stored(t, s); len(n) != 0 {
		t.Fatalf("stored %v", n)
	}
}

func TestSaveImagesSizeLimit(t *testing.T) {
	s := newStore(t)
	exact := make([]byte, MaxImageBytes)
	copy(exact, pngBytes(t))
	urls, err := s.SaveImages(testOwner, form(t, upload{"a.png", "image/png", exact}))
	if err != nil || len(urls) != 1 {
		t.Fatalf("exactly 5 MiB: %v %v", urls, err)
	}
	over := append(exact, 0)
	_, err = s.SaveImages(testOwner, form(t, upload{"b.png", "image/png", over}))
	wantErr(t, err, domain.TooLarge, "Each image must be at most 5 MB")
}

// A header that under-reports its size is still cut off at the cap.
func TestSaveImagesDoesNotTrustHeaderSize(t *testing.T) {
	s := newStore(t)
	data := make([]byte, MaxImageBytes+10)
	copy(data, pngBytes(t))
	hs := form(t, upload{"a.png", "image/png", data})
	hs[0].Size = 10
	_, err := s.SaveImages(testOwner, hs)
	wantErr(t, err, domain.TooLarge, "Each image must be at most 5 MB")
}

func TestSaveImagesAllOrNone(t *testing.T) {
	s := newStore(t)
	_, err := s.SaveImages(testOwner, form(t,
		upload{"a.png", "image/png", pngBytes(t)},
		upload{"b.gif", "image/gif", gifBytes(t)},
		upload{"c.png", "image/png", []byte("not an image")},
	))
	wantErr(t, err, domain.Invalid, "imageUrl must be PNG, JPEG, WebP or GIF images")
	if n := stored(t, s); len(n) != 0 {
		t.Fatalf("a refused batch left %v", n)
	}
	big := make([]byte, MaxImageBytes+1)
	copy(big, pngBytes(t))
	_, err = s.SaveImages(testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}, upload{"big.png", "image/png", big}))
	wantErr(t, err, domain.TooLarge, "Each image must be at most 5 MB")
	if n := stored(t, s); len(n) != 0 {
		t.Fatalf("a refused batch left %v", n)
	}
}

func TestNamesAreUnguessable(t *testing.T) {
	s := newStore(t)
	seen := map[string]bool{}
	for range 20 {
		urls, err := s.SaveImages(testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}, upload{"a.png", "image/png", pngBytes(t)}))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range urls {
			n := nameOf(t, u)
			if seen[n] {
				t.Fatalf("name %s repeated", n)
			}
			seen[n] = true
		}
	}
}

func TestOpenRefusesForeignNames(t *testing.T) {
	s := newStore(t)
	urls, err := s.SaveImages(testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}))
	if err != nil {
		t.Fatal(err)
	}
	name := nameOf(t, urls[0])
	// A file that exists beside the store must not be reachable.
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.dir), "x"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"../x", "..", "", "/etc/passwd",
		strings.ToUpper(name),
		strings.TrimSuffix(name, ".png") + ".PNG",
		strings.TrimSuffix(name, ".png") + ".svg",
		strings.TrimSuffix(name, ".png") + ".html",
		strings.TrimSuffix(name, ".png"),
		"../files/" + name,
		name[1:],
		strings.Repeat("0", 32) + ".png", // well-formed but absent
	} {
		_, _, _, err := s.Open(bad)
		wantErr(t, err, domain.NotFound, "File not found")
	}
	f, ct, _, err := s.Open(name)
	if err != nil || ct != "image/png" {
		t.Fatalf("open %s: %s %v", name, ct, err)
	}
	f.Close()
}

func TestRemove(t *testing.T) {
	s := newStore(t)
	urls, err := s.SaveImages(testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}, upload{"b.jpg", "image/jpeg", jpegBytes(t)}))
	if err != nil {
		t.Fatal(err)
	}
	s.Remove(append([]string{"https://elsewhere.test/files/x.png", testURL + "/files/../x"}, urls...))
	if n := stored(t, s); len(n) != 0 {
		t.Fatalf("left %v", n)
	}
	for _, u := range urls {
		_, _, _, err := s.Open(nameOf(t, u))
		wantErr(t, err, domain.NotFound, "File not found")
	}
}

func TestImagesFrom(t *testing.T) {
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for i, field := range []string{"imageUrl", "imageUrl[]", "imageUrl", "other"} {
		p, _ := w.CreateFormFile(field, "f"+string(rune('a'+i))+".png")
		p.Write(pngBytes(t))
	}
	w.WriteField("imageUrl", "not a file")
	w.Close()
	f, err := multipart.NewReader(&body, w.Boundary()).ReadForm(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.RemoveAll()
	hs, err := ImagesFrom(f, "imageUrl", 3)
	if err != nil || len(hs) != 3 {
		t.Fatalf("got %d, %v", len(hs), err)
	}
	_, err = ImagesFrom(f, "imageUrl", 2)
	wantErr(t, err, domain.Invalid, "imageUrl accepts at most 2 images")
	if hs, err := ImagesFrom(nil, "imageUrl", 5); hs != nil || err != nil {
		t.Fatalf("nil form: %v %v", hs, err)
	}
}

var testOwner = Owner("m1", "test")

// TestQuotaPerOwner: an owner's files are capped in bytes; a file past the
// cap is refused and stores nothing, other owners are not affected, and a
// removed file frees its bytes.
func TestQuotaPerOwner(t *testing.T) {
	png := pngBytes(t)
	s, err := New(t.TempDir(), testURL, int64(2*len(png)))
	if err != nil {
		t.Fatal(err)
	}
	urls, err := s.SaveImages(testOwner, form(t, upload{"a.png", "image/png", png}, upload{"b.png", "image/png", png}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.SaveImages(testOwner, form(t, upload{"c.png", "image/png", png}))
	wantErr(t, err, domain.TooLarge, "Storage quota exceeded")
	if n := stored(t, s); len(n) != 2 {
		t.Fatalf("stored %v", n)
	}
	if _, err := s.SaveImages(Owner("m2", "test"), form(t, upload{"c.png", "image/png", png})); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	s.Remove(urls[:1])
	if _, err := s.SaveImages(testOwner, form(t, upload{"c.png", "image/png", png})); err != nil {
		t.Fatalf("after a removal: %v", err)
	}
	// A fresh store (another instance, a restart) measures what is stored.
	again, err := New(filepath.Dir(s.dir), testURL, int64(2*len(png)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = again.SaveImages(testOwner, form(t, upload{"d.png", "image/png", png}))
	wantErr(t, err, domain.TooLarge, "Storage quota exceeded")
}

// TestUnfinishedUploadsAreCollected: an upload's temporary file that a
// stopped process left behind is removed when the store next opens, once
// it is old enough not to be an upload still running.
func TestUnfinishedUploadsAreCollected(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "files", testOwner)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(dir, ".upload-1"), filepath.Join(dir, ".upload-2")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * unfinishedAge)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := New(root, testURL, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old unfinished upload: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("running upload removed: %v", err)
	}
}

// FuzzStoredNames: whatever name a request asks for, the store opens only
// a path inside its own folder, and only names it could have handed out.
func FuzzStoredNames(f *testing.F) {
	for _, s := range []string{"", "../x", testOwner + "/" + strings.Repeat("a", 32) + ".png", strings.Repeat("0", 32) + ".pdf",
		testOwner + "/../../etc/passwd", "/" + testOwner + "/x.png", testOwner + "//" + strings.Repeat("a", 32) + ".png"} {
		f.Add(s)
	}
	s := &Store{dir: "/srv/files"}
	f.Fuzz(func(t *testing.T, name string) {
		path, ext, ok := s.path(name)
		if !ok {
			return
		}
		if rel, err := filepath.Rel(s.dir, path); err != nil || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
			t.Fatalf("%q opens %q, outside the store", name, path)
		}
		if _, known := extType[ext]; !known {
			t.Fatalf("%q has extension %q", name, ext)
		}
		owner, file, hasOwner := strings.Cut(name, "/")
		if !hasOwner {
			file = owner
		} else if !ownerName.MatchString(owner) {
			t.Fatalf("%q accepted with owner %q", name, owner)
		}
		if !storedName.MatchString(file) {
			t.Fatalf("%q accepted with file %q", name, file)
		}
	})
}
