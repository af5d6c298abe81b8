package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/internal/files"
)

const uploadsPublicURL = "https://cdn.escrowd.test"

type uploadPart struct {
	field, filename, contentType string
	data                         []byte
}

// uploadForm builds a real multipart/form-data body: form fields, then
// file parts whose filename and Content-Type are whatever the test declares.
func uploadForm(t *testing.T, fields map[string]string, parts ...uploadPart) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		if err := w.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.field, p.filename))
		h.Set("Content-Type", p.contentType)
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(p.data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), w.FormDataContentType()
}

func uploadImage(t *testing.T, enc func(io.Writer, image.Image) error) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 3, 3))
	img.Set(1, 1, color.RGBA{G: 200, A: 255})
	var b bytes.Buffer
	if err := enc(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func uploadPNG(t *testing.T) []byte { return uploadImage(t, png.Encode) }
func uploadGIF(t *testing.T) []byte {
	return uploadImage(t, func(w io.Writer, m image.Image) error { return gif.Encode(w, m, nil) })
}

// uploadDo sends a request with an arbitrary body (a reader of unknown
// length is sent chunked) and its own content type, through h.do.
func (h *harness) uploadDo(method, path, key, contentType string, body io.Reader, headers map[string]string) resp {
	h.t.Helper()
	hs := map[string]string{}
	for k, v := range headers {
		hs[k] = v
	}
	if contentType != "" {
		hs["Content-Type"] = contentType
	}
	r := req{method: method, path: path, key: key, headers: hs}
	if body != nil {
		r.body = body
	}
	return h.do(r)
}

// uploadProbe registers a multipart route that saves up to 5 images and
// echoes the URLs and the form fields, the way escrow handlers use them.
func (h *harness) uploadProbe(path string, multipartLimit bool) {
	s := h.api
	s.handle(http.MethodPost, path, Policy{CID: CIDOptional}, func(c echo.Context) error {
		if _, err := multipartForm(c); err != nil {
			return err
		}
		vals, isMultipart := formValues(c)
		urls, err := s.saveImages(c, 5)
		if err != nil {
			return err
		}
		return respond(c, http.StatusOK, "ok", map[string]any{"urls": urls, "fields": vals, "multipart": isMultipart})
	}, multipartLimit)
}

func TestUploadsEndToEnd(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.PublicURL = uploadsPublicURL + "/" })
	h.uploadProbe("/v1/probe/upload", true)
	pngData, gifData := uploadPNG(t), uploadGIF(t)

	// Two images with lying names and types, plus the escrow fields.
	body, ct := uploadForm(t,
		map[string]string{"amount": "5000", "purpose": "Phone", "whoPays": "buyer"},
		uploadPart{"imageUrl", "photo.jpg", "image/jpeg", pngData},
		uploadPart{"imageUrl[]", "anim.exe", "application/octet-stream", gifData},
	)
	r := h.uploadDo("POST", "/v1/probe/upload", h.std(), ct, bytes.NewReader(body), nil).expect(t, 200, "ok")
	d := r.obj()
	if d["multipart"] != true {
		t.Fatalf("not seen as multipart: %s", r.Raw)
	}
	fields, _ := d["fields"].(map[string]any)
	if fields["amount"] != "5000" || fields["purpose"] != "Phone" || fields["whoPays"] != "buyer" || len(fields) != 3 {
		t.Fatalf("fields %v", fields)
	}
	urls, _ := d["urls"].([]any)
	if len(urls) != 2 {
		t.Fatalf("urls %s", r.Raw)
	}
	want := []struct {
		data []byte
		typ  string
	}{{pngData, "image/png"}, {gifData, "image/gif"}}
	for i, u := range urls {
		url := u.(string)
		path, ok := strings.CutPrefix(url, uploadsPublicURL+"/files/")
		if !ok || len(path) != 16+1+32+1+len(strings.TrimPrefix(want[i].typ, "image/")) {
			t.Fatalf("url %q", url)
		}
		// No key: the unguessable name is the capability.
		g := h.uploadDo("GET", "/files/"+path, "", "", nil, nil)
		if g.Status != 200 || !bytes.Equal(g.Raw, want[i].data) {
			t.Fatalf("GET %s: %d, %d bytes", url, g.Status, len(g.Raw))
		}
		if got := g.Header.Get("Content-Type"); got != want[i].typ {
			t.Fatalf("content type %q, want %q", got, want[i].typ)
		}
		if g.Header.Get("X-Content-Type-Options") != "nosniff" || g.Header.Get("Cache-Control") != "private, max-age=86400" ||
			g.Header.Get("Content-Security-Policy") != "sandbox" || g.Header.Get("Content-Disposition") != "" {
			t.Fatalf("headers %v", g.Header)
		}
		// Conditional and range requests come from http.ServeContent.
		if c := h.uploadDo("GET", "/files/"+path, "", "", nil, map[string]string{"If-None-Match": g.Header.Get("ETag")}); c.Status != 304 {
			t.Fatalf("If-None-Match: %d", c.Status)
		}
		if c := h.uploadDo("GET", "/files/"+path, "", "", nil, map[string]string{"Range": "bytes=0-3"}); c.Status != 206 || !bytes.Equal(c.Raw, want[i].data[:4]) {
			t.Fatalf("Range: %d %q", c.Status, c.Raw)
		}
		if c := h.uploadDo("HEAD", "/files/"+path, "", "", nil, nil); c.Status != 200 || c.Header.Get("Content-Type") != want[i].typ {
			t.Fatalf("HEAD: %d %v", c.Status, c.Header)
		}
	}

	// JSON requests carry no images and no form fields.
	j := h.do(req{method: "POST", path: "/v1/probe/upload", key: h.std(), body: map[string]any{"amount": 5000}}).expect(t, 200, "ok")
	if j.obj()["multipart"] != false || j.obj()["urls"] != nil {
		t.Fatalf("json: %s", j.Raw)
	}

	for _, p := range []string{"/files/nonexistent", "/files/" + strings.Repeat("0", 32) + ".png",
		"/files/..%2F..%2Fgo.mod", "/files/" + strings.ToUpper(strings.Repeat("a", 32)) + ".png"} {
		h.do(req{method: "GET", path: p}).expect(t, 404, "File not found")
	}

	var six []uploadPart
	for range 6 {
		six = append(six, uploadPart{"imageUrl", "a.png", "image/png", pngData})
	}
	body, ct = uploadForm(t, nil, six...)
	h.uploadDo("POST", "/v1/probe/upload", h.std(), ct, bytes.NewReader(body), nil).expect(t, 400, "imageUrl accepts at most 5 images")

	big := make([]byte, 5<<20+1)
	copy(big, pngData)
	body, ct = uploadForm(t, nil, uploadPart{"imageUrl", "a.png", "image/png", pngData}, uploadPart{"imageUrl", "big.png", "image/png", big})
	h.uploadDo("POST", "/v1/probe/upload", h.std(), ct, bytes.NewReader(body), nil).expect(t, 413, "Each image must be at most 5 MB")

	body, ct = uploadForm(t, nil, uploadPart{"imageUrl", "a.png", "image/png", []byte("<svg xmlns='http://www.w3.org/2000/svg'/>")})
	h.uploadDo("POST", "/v1/probe/upload", h.std(), ct, bytes.NewReader(body), nil).expect(t, 400, "imageUrl must be PNG, JPEG, WebP or GIF images")

	// Refused requests stored nothing: only the first two files exist, in
	// the merchant environment's folder.
	if ents := h.storedFiles(files.Owner(h.m.MerchantID, string(domain.Test))); len(ents) != 2 || len(h.storedFiles("")) != 2 {
		t.Fatalf("stored files: %v", ents)
	}

	// No key on the upload route itself is still refused.
	h.uploadDo("POST", "/v1/probe/upload", "", ct, bytes.NewReader(body), nil).expect(t, 401, "No token provided")

	h.uploadDo("POST", "/v1/probe/upload", h.std(), "multipart/form-data; boundary=nope", strings.NewReader("garbage"), nil).
		expect(t, 400, "Invalid multipart body")
}

// A chunked body (no Content-Length) over the route's limit is cut off
// while the form is parsed: 413, not a parse error.
func TestUploadsBodyLimitWhileParsing(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MultipartBodyLimit = 1 << 20 })
	h.uploadProbe("/v1/probe/upload", true)
	big := make([]byte, 2<<20)
	copy(big, uploadPNG(t))
	body, ct := uploadForm(t, nil, uploadPart{"imageUrl", "a.png", "image/png", big})
	h.uploadDo("POST", "/v1/probe/upload", h.std(), ct, io.NopCloser(bytes.NewReader(body)), nil).
		expect(t, 413, "Request body too large")
	h.uploadDo("POST", "/v1/probe/upload", h.std(), ct, bytes.NewReader(body), nil).
		expect(t, 413, "Request body too large")
}

// TestKeyedUploadIsSpooledToDisk: a multipart upload under an
// Idempotency-Key is read once for its fingerprint and replayed to the
// handler; past spoolMemory it waits in a temporary file, not in memory.
// The handler gets every byte (the stored image is the one sent), the file
// is gone when the request is, and a retry with another boundary replays
// the stored answer.
func TestKeyedUploadIsSpooledToDisk(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	h := newHarness(t, func(c *Config) { c.PublicURL = uploadsPublicURL + "/" })
	var spooledDuringHandler []string
	s := h.api
	s.handle(http.MethodPost, "/v1/probe/keyed-upload", Policy{CID: CIDOptional}, func(c echo.Context) error {
		spooledDuringHandler = spoolFiles(t, tmp)
		if _, err := multipartForm(c); err != nil {
			return err
		}
		urls, err := s.saveImages(c, 5)
		if err != nil {
			return err
		}
		return respond(c, http.StatusCreated, "ok", map[string]any{"urls": urls})
	}, true)
	// A real PNG followed by padding: 3 MB, three times the spool's memory.
	img := append(uploadPNG(t), bytes.Repeat([]byte{0}, 3<<20)...)
	send := func(boundary string) resp {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		if err := w.SetBoundary(boundary); err != nil {
			t.Fatal(err)
		}
		hd := textproto.MIMEHeader{}
		hd.Set("Content-Disposition", `form-data; name="imageUrl"; filename="big.png"`)
		hd.Set("Content-Type", "image/png")
		pw, err := w.CreatePart(hd)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(img)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return h.uploadDo("POST", "/v1/probe/keyed-upload", h.std(), w.FormDataContentType(), &b,
			map[string]string{"Idempotency-Key": "upload-1"})
	}
	first := send("first-boundary-1111").expect(t, 201, "ok")
	if len(spooledDuringHandler) != 1 {
		t.Fatalf("while the handler ran, spool files %v, want one", spooledDuringHandler)
	}
	if left := spoolFiles(t, tmp); len(left) != 0 {
		t.Fatalf("spool files left after the request: %v", left)
	}
	urls, _ := first.obj()["urls"].([]any)
	if len(urls) != 1 {
		t.Fatalf("urls: %s", first.Raw)
	}
	rel, _ := strings.CutPrefix(urls[0].(string), uploadsPublicURL+"/files/")
	stored, err := h.api.Files().Backend().Get(context.Background(), rel)
	if err != nil || !bytes.Equal(stored.Data, img) {
		t.Fatalf("stored image: %d bytes of %d sent (%v)", len(stored.Data), len(img), err)
	}
	spooledDuringHandler = nil
	again := send("second-boundary-22").expect(t, 201, "ok")
	if !bytes.Equal(again.Raw, first.Raw) || spooledDuringHandler != nil {
		t.Fatalf("retry with another boundary: handler ran %v, answer %s, want the replay of %s", spooledDuringHandler != nil, again.Raw, first.Raw)
	}
	if left := spoolFiles(t, tmp); len(left) != 0 {
		t.Fatalf("spool files left after the replay: %v", left)
	}
}

// TestKeyedUploadOverLimitLeavesNoSpoolFile: a keyed upload that grows
// past the route's limit after it was spooled to disk (a chunked body, no
// Content-Length to refuse it up front) is answered 413, runs no handler,
// leaves no temporary file behind, and does not hold its key.
func TestKeyedUploadOverLimitLeavesNoSpoolFile(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	h := newHarness(t, func(c *Config) { c.MultipartBodyLimit = 2 << 20 })
	ran := 0
	h.api.handle(http.MethodPost, "/v1/probe/keyed-big", Policy{CID: CIDOptional}, func(c echo.Context) error {
		ran++
		return respond(c, http.StatusCreated, "ok", map[string]any{})
	}, true)
	big := make([]byte, 3<<20) // past spoolMemory and past the limit
	copy(big, uploadPNG(t))
	body, ct := uploadForm(t, nil, uploadPart{"imageUrl", "a.png", "image/png", big})
	keyed := map[string]string{"Idempotency-Key": "big-1"}
	h.uploadDo("POST", "/v1/probe/keyed-big", h.std(), ct, io.NopCloser(bytes.NewReader(body)), keyed).
		expect(t, 413, "Request body too large")
	if ran != 0 {
		t.Fatalf("handler ran %d times for a body over the limit", ran)
	}
	if left := spoolFiles(t, tmp); len(left) != 0 {
		t.Fatalf("spool files left after a 413: %v", left)
	}
	// The key was never reserved: the same key with a body within the
	// limit runs.
	small, ct := uploadForm(t, nil, uploadPart{"imageUrl", "a.png", "image/png", uploadPNG(t)})
	h.uploadDo("POST", "/v1/probe/keyed-big", h.std(), ct, bytes.NewReader(small), keyed).expect(t, 201, "ok")
	if ran != 1 {
		t.Fatalf("handler ran %d times, want once", ran)
	}
}

// TestKeyedUploadWhoseHandlerPanicsLeavesNoSpoolFile: the temporary file a
// keyed upload waits in is removed when the request ends however it ends,
// here by a handler panic that the recover middleware further out answers
// 500. The key, under which nothing was written, is released for a retry.
func TestKeyedUploadWhoseHandlerPanicsLeavesNoSpoolFile(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	h := newHarness(t)
	var spooled []string
	ran := 0
	h.api.handle(http.MethodPost, "/v1/probe/keyed-panic", Policy{CID: CIDOptional}, func(c echo.Context) error {
		if ran++; ran == 1 {
			spooled = spoolFiles(t, tmp)
			panic("a handler bug")
		}
		return respond(c, http.StatusCreated, "ok", map[string]any{})
	}, true)
	big := append(uploadPNG(t), bytes.Repeat([]byte{0}, 2<<20)...) // past spoolMemory
	body, ct := uploadForm(t, nil, uploadPart{"imageUrl", "a.png", "image/png", big})
	keyed := map[string]string{"Idempotency-Key": "panic-1"}
	h.uploadDo("POST", "/v1/probe/keyed-panic", h.std(), ct, bytes.NewReader(body), keyed).expect(t, 500, "")
	if len(spooled) != 1 {
		t.Fatalf("while the handler ran, spool files %v, want one", spooled)
	}
	if left := spoolFiles(t, tmp); len(left) != 0 {
		t.Fatalf("spool files left after a handler panic: %v", left)
	}
	h.uploadDo("POST", "/v1/probe/keyed-panic", h.std(), ct, bytes.NewReader(body), keyed).expect(t, 201, "ok")
	if ran != 2 {
		t.Fatalf("handler ran %d times, want twice", ran)
	}
	if left := spoolFiles(t, tmp); len(left) != 0 {
		t.Fatalf("spool files left after the retry: %v", left)
	}
}
