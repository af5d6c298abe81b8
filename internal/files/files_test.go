package files

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"mime/multipart"
	"net/textproto"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/pgtest"
)

const testURL = "https://files.example.test"

var ctx = context.Background()

// newStore is a store over a fresh PostgreSQL backend (the default).
func newPool(t *testing.T) *pgxpool.Pool { return pgtest.NewPool(t) }

func newStore(t *testing.T) *Store {
	t.Helper()
	return New(Postgres{Pool: pgtest.NewPool(t)}, testURL+"/", 0)
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

// stored are the names of testOwner's stored files.
func stored(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	err := s.Backend().List(ctx, func(i Info) error {
		if ownerOf(i.Name) == testOwner {
			out = append(out, i.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
		urls, err := s.SaveImages(ctx, testOwner, form(t, upload{"upload.txt", "text/plain", c.data}))
		if err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		if len(urls) != 1 || !strings.HasSuffix(urls[0], "."+c.ext) {
			t.Fatalf("%s: urls %v", c.typ, urls)
		}
		f, ct, mod, err := s.Open(ctx, nameOf(t, urls[0]))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if ct != c.typ || !bytes.Equal(got, c.data) || mod.IsZero() {
			t.Fatalf("%s: served %s, %d bytes, mod %v", c.typ, ct, len(got), mod)
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
		_, err := s.SaveImages(ctx, testOwner, form(t, upload{"x.png", "image/png", data}))
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
	urls, err := s.SaveImages(ctx, testOwner, form(t, upload{"a.png", "image/png", exact}))
	if err != nil || len(urls) != 1 {
		t.Fatalf("exactly 5 MiB: %v %v", urls, err)
	}
	over := append(exact, 0)
	_, err = s.SaveImages(ctx, testOwner, form(t, upload{"b.png", "image/png", over}))
	wantErr(t, err, domain.TooLarge, "Each image must be at most 5 MB")
}

// A header that under-reports its size is still cut off at the cap.
func TestSaveImagesDoesNotTrustHeaderSize(t *testing.T) {
	s := newStore(t)
	data := make([]byte, MaxImageBytes+10)
	copy(data, pngBytes(t))
	hs := form(t, upload{"a.png", "image/png", data})
	hs[0].Size = 10
	_, err := s.SaveImages(ctx, testOwner, hs)
	wantErr(t, err, domain.TooLarge, "Each image must be at most 5 MB")
}

func TestSaveImagesAllOrNone(t *testing.T) {
	s := newStore(t)
	_, err := s.SaveImages(ctx, testOwner, form(t,
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
	_, err = s.SaveImages(ctx, testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}, upload{"big.png", "image/png", big}))
	wantErr(t, err, domain.TooLarge, "Each image must be at most 5 MB")
	if n := stored(t, s); len(n) != 0 {
		t.Fatalf("a refused batch left %v", n)
	}
}

func TestNamesAreUnguessable(t *testing.T) {
	s := newStore(t)
	seen := map[string]bool{}
	for range 20 {
		urls, err := s.SaveImages(ctx, testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}, upload{"a.png", "image/png", pngBytes(t)}))
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
	urls, err := s.SaveImages(ctx, testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}))
	if err != nil {
		t.Fatal(err)
	}
	name := nameOf(t, urls[0])
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
		_, _, _, err := s.Open(ctx, bad)
		wantErr(t, err, domain.NotFound, "File not found")
	}
	f, ct, _, err := s.Open(ctx, name)
	if err != nil || ct != "image/png" {
		t.Fatalf("open %s: %s %v", name, ct, err)
	}
	f.Close()
}

func TestRemove(t *testing.T) {
	s := newStore(t)
	urls, err := s.SaveImages(ctx, testOwner, form(t, upload{"a.png", "image/png", pngBytes(t)}, upload{"b.jpg", "image/jpeg", jpegBytes(t)}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, append([]string{"https://elsewhere.test/files/x.png", testURL + "/files/../x"}, urls...)); err != nil {
		t.Fatal(err)
	}
	if n := stored(t, s); len(n) != 0 {
		t.Fatalf("left %v", n)
	}
	for _, u := range urls {
		_, _, _, err := s.Open(ctx, nameOf(t, u))
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

// TestQuotaPerOwner: an owner's files are capped in bytes, on every
// backend; a file past the cap is refused and stores nothing, other owners
// are not affected, and a removed file frees its bytes.
func TestQuotaPerOwner(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		png := pngBytes(t)
		s := New(b, testURL, int64(2*len(png)))
		urls, err := s.SaveImages(ctx, testOwner, form(t, upload{"a.png", "image/png", png}, upload{"b.png", "image/png", png}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.SaveImages(ctx, testOwner, form(t, upload{"c.png", "image/png", png}))
		wantErr(t, err, domain.TooLarge, "Storage quota exceeded")
		if n := stored(t, s); len(n) != 2 {
			t.Fatalf("stored %v", n)
		}
		if _, err := s.SaveImages(ctx, Owner("m2", "test"), form(t, upload{"c.png", "image/png", png})); err != nil {
			t.Fatalf("another owner: %v", err)
		}
		if err := s.Remove(ctx, urls[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SaveImages(ctx, testOwner, form(t, upload{"c.png", "image/png", png})); err != nil {
			t.Fatalf("after a removal: %v", err)
		}
		// A fresh store (another instance, a restart) measures what is stored.
		again := New(b, testURL, int64(2*len(png)))
		_, err = again.SaveImages(ctx, testOwner, form(t, upload{"d.png", "image/png", png}))
		wantErr(t, err, domain.TooLarge, "Storage quota exceeded")
	})
}

// FuzzStoredNames: whatever name a request asks for, the store accepts
// only names it could have handed out: an owner folder and a random file
// name with a known extension, nothing that could be a path elsewhere.
func FuzzStoredNames(f *testing.F) {
	for _, s := range []string{"", "../x", testOwner + "/" + strings.Repeat("a", 32) + ".png", strings.Repeat("0", 32) + ".pdf",
		testOwner + "/../../etc/passwd", "/" + testOwner + "/x.png", testOwner + "//" + strings.Repeat("a", 32) + ".png"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !ValidName(name) {
			return
		}
		if strings.Contains(name, "..") || strings.HasPrefix(name, "/") || strings.Count(name, "/") > 1 {
			t.Fatalf("%q accepted", name)
		}
		if _, known := extType[name[strings.LastIndexByte(name, '.')+1:]]; !known {
			t.Fatalf("%q has an unknown extension", name)
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
