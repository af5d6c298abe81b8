// The fingerprint of a keyed request, insensitive to a multipart body's
// random boundary.

package httpapi

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// fingerprinter computes a request's fingerprint, SHA-256 over method, path
// and query, media type and body, with the body written to it as it is
// read. A multipart body's boundary is random per attempt, so every
// "--boundary" in it is hashed as "--": a retry that re-encodes the same
// form is the same request.
type fingerprinter struct {
	h     hash.Hash
	delim []byte // "--boundary"; nil when the body is hashed as is
	// pend holds the body's last len(delim)-1 bytes not yet hashed: they
	// may be the start of a delimiter the next write completes.
	pend []byte
	// buf joins pend and a write; reused, so that spooling a large upload
	// does not allocate a copy of every piece io.Copy hands over.
	buf []byte
}

func newFingerprinter(req *http.Request) *fingerprinter {
	f := &fingerprinter{h: sha256.New()}
	mediaType, params, _ := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
	for _, part := range []string{req.Method, req.URL.EscapedPath(), req.URL.RawQuery, mediaType} {
		f.h.Write([]byte(part))
		f.h.Write([]byte{0})
	}
	if b := params["boundary"]; strings.HasPrefix(mediaType, "multipart/") && b != "" {
		f.delim = []byte("--" + b)
	}
	return f
}

func (f *fingerprinter) Write(p []byte) (int, error) {
	if f.delim == nil {
		return f.h.Write(p)
	}
	f.buf = append(append(f.buf[:0], f.pend...), p...)
	buf := f.buf
	for {
		i := bytes.Index(buf, f.delim)
		if i < 0 {
			break
		}
		f.h.Write(buf[:i])
		f.h.Write([]byte("--"))
		buf = buf[i+len(f.delim):]
	}
	// A delimiter starting before the kept tail would have ended inside
	// buf and been found above.
	keep := min(len(buf), len(f.delim)-1)
	f.h.Write(buf[:len(buf)-keep])
	f.pend = append(f.pend[:0], buf[len(buf)-keep:]...)
	return len(p), nil
}

func (f *fingerprinter) sum() []byte {
	f.h.Write(f.pend)
	f.pend = nil
	return f.h.Sum(nil)
}
