package httpapi

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// requestFingerprint is the fingerprint of req with the whole body at hand.
func requestFingerprint(req *http.Request, body []byte) []byte {
	f := newFingerprinter(req)
	_, _ = f.Write(body)
	return f.sum()
}

// fingerprintByDefinition is the fingerprint as the idempotency rules and the
// fingerprinter's comment define it, computed the plain way: every
// "--boundary" of a multipart body replaced by "--", then hashed at once.
func fingerprintByDefinition(method, path, query, mediaType, boundary string, body []byte) []byte {
	h := sha256.New()
	for _, part := range []string{method, path, query, mediaType} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	if boundary != "" {
		body = bytes.ReplaceAll(body, []byte("--"+boundary), []byte("--"))
	}
	h.Write(body)
	return h.Sum(nil)
}

// FuzzFingerprintStreaming: the fingerprint of a body written in pieces of
// any sizes (as io.Copy hands them over while the body is spooled) equals
// the fingerprint by definition, wherever a boundary falls across pieces.
func FuzzFingerprintStreaming(f *testing.F) {
	f.Add("B", []byte("--B\r\nx\r\n--B--"), []byte{1, 2, 3})
	f.Add("QQ", []byte("a--QQb--Q--QQ--QQQ"), []byte{2, 1})
	f.Add("", []byte(`{"amount":5000}`), []byte{4})
	f.Add("xy", []byte("---xy--x-y--xy"), []byte{1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, boundary string, body, cuts []byte) {
		if strings.ContainsAny(boundary, "\";\r\n\\ \t=,") {
			t.Skip() // not a boundary a Content-Type can carry unquoted
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/escrow/create?x=1", nil)
		mediaType := "application/json"
		if boundary != "" {
			mediaType = "multipart/form-data"
			req.Header.Set(echo.HeaderContentType, mediaType+"; boundary="+boundary)
		} else {
			req.Header.Set(echo.HeaderContentType, mediaType)
		}
		if _, params, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType)); err != nil || params["boundary"] != boundary {
			t.Skip() // a Content-Type that does not parse (the body is then hashed as is)
		}
		fp := newFingerprinter(req)
		rest := body
		for _, c := range cuts {
			n := min(int(c), len(rest))
			if _, err := fp.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		_, _ = fp.Write(rest)
		got := fp.sum()
		want := fingerprintByDefinition(http.MethodPost, "/v1/escrow/create", "x=1", mediaType, boundary, body)
		if !bytes.Equal(got, want) {
			t.Fatalf("boundary %q, body %q in cuts %v: streamed fingerprint differs from the definition", boundary, body, cuts)
		}
	})
}

// spoolFiles lists the spool's temporary files in dir.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "escrowd-request-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSpoolKeepsSmallBodiesInMemoryAndLargeOnesOnDisk: up to spoolMemory a
// body stays in memory; past it, all of it moves to a temporary file. Both
// read back byte for byte, and remove deletes the file.
func TestSpoolKeepsSmallBodiesInMemoryAndLargeOnesOnDisk(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	for _, size := range []int{0, 10, spoolMemory, spoolMemory + 1, 3*spoolMemory + 7} {
		data := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		sp := &spool{}
		// Read in uneven pieces, as a request body may hand them over.
		if n, err := sp.fill(&pieceReader{rest: data, max: 32<<10 + 3}); err != nil || n != int64(size) {
			t.Fatalf("%d bytes: filled %d (%v)", size, n, err)
		}
		onDisk := len(spoolFiles(t, dir)) == 1
		if onDisk != (size > spoolMemory) || sp.mem.Len() > spoolMemory {
			t.Fatalf("%d bytes: on disk %v, %d in memory", size, onDisk, sp.mem.Len())
		}
		r, err := sp.reader()
		if err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("%d bytes: read back %d bytes (%v)", size, len(back), err)
		}
		sp.remove()
		sp.remove()
		if left := spoolFiles(t, dir); len(left) != 0 {
			t.Fatalf("%d bytes: left behind %v", size, left)
		}
	}
	var none *spool
	none.remove() // nil-safe: a request without a body has no spool
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// pieceReader hands rest over at most max bytes a read.
type pieceReader struct {
	rest []byte
	max  int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.max)], r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// TestSpoolingASmallBodyAllocatesLittle: every keyed write spools its body,
// almost always a few hundred bytes of JSON, which must cost about its own
// size, not a 32 KB copy buffer each (io.Copy's, when the body limit's
// reader offers no WriterTo).
func TestSpoolingASmallBodyAllocatesLittle(t *testing.T) {
	const n = 200
	body := `{"reference":"dep-1","amount":2500,"transactionType":"deposit","description":"a deposit"}`
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodPost, "/v1/payment/create-intent", nil)
		r.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		// As the route's body limit hands the body over.
		r.Body = http.MaxBytesReader(nil, io.NopCloser(&pieceReader{rest: []byte(body), max: len(body)}), 1<<20)
		reqs[i] = r
	}
	s := NewIdempotencyStore(nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, r := range reqs {
		_, sp, err := s.spoolBody(r)
		if err != nil {
			t.Fatal(err)
		}
		sp.remove()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 8<<10 {
		t.Fatalf("spooling a %d-byte body allocates %d bytes", len(body), per)
	}
	for _, r := range reqs[:1] {
		if got, err := io.ReadAll(r.Body); err != nil || string(got) != body {
			t.Fatalf("the handler reads %q (%v), want %q", got, err, body)
		}
	}
}

// TestFingerprintStreamingDoesNotCopyEveryPiece: hashing a multipart body
// as io.Copy hands it over (32 KB pieces) allocates nothing per piece once
// warm; a keyed upload of many megabytes must not leave a garbage copy of
// itself behind.
func TestFingerprintStreamingDoesNotCopyEveryPiece(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/v1/escrow/create", nil)
	req.Header.Set(echo.HeaderContentType, "multipart/form-data; boundary=XyZ")
	f := newFingerprinter(req)
	piece := bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
	copy(piece[len(piece)-3:], "--X") // a delimiter cut across pieces
	_, _ = f.Write(piece)
	if n := testing.AllocsPerRun(100, func() { _, _ = f.Write(piece) }); n > 0 {
		t.Fatalf("%.1f allocations per 32 KB piece", n)
	}
}

// failingReader hands over n bytes, then fails as a connection that drops
// mid-body does.
type failingReader struct{ n int }

var errBodyCut = errors.New("connection reset mid-body")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errBodyCut
	}
	k := min(len(p), r.n)
	clear(p[:k])
	r.n -= k
	return k, nil
}

// TestSpoolBodyCutAfterSpillingLeavesNoFile: a keyed body that fails to
// read after it has moved to a temporary file (the client went away
// mid-upload) is an error, and the file is removed there and then: no
// caller gets a spool to remove.
func TestSpoolBodyCutAfterSpillingLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	r := httptest.NewRequest(http.MethodPost, "/v1/escrow/create", nil)
	r.Header.Set(echo.HeaderContentType, "multipart/form-data; boundary=XyZ")
	r.Body = http.MaxBytesReader(nil, io.NopCloser(&failingReader{n: 2 * spoolMemory}), 32<<20)
	fp, sp, err := NewIdempotencyStore(nil).spoolBody(r)
	if !errors.Is(err, errBodyCut) || fp != nil || sp != nil {
		t.Fatalf("spoolBody = %x, %v, %v; want the read error and no spool", fp, sp, err)
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Fatalf("spool files left after a cut body: %v", left)
	}
}
