// Spooling a keyed request's body, fingerprinting it on the way, so that the
// handler reads it again from the spool.

package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"

	"github.com/labstack/echo/v4"
)

// spoolMemory is how much of a keyed request body is kept in memory; the
// rest of a larger one (a multipart upload of images) waits in a temporary
// file, so concurrent uploads cost disk, not up to the body limit of memory
// each.
const spoolMemory = 1 << 20

// spoolBody reads the whole body once, hashing it for the fingerprint as it
// goes, and puts an identical reader back for the handler: from memory, or
// from a temporary file the caller removes (sp.remove) once the request is
// done. A body over the route's limit is 413.
func (s *IdempotencyStore) spoolBody(req *http.Request) (fp []byte, sp *spool, err error) {
	fh := newFingerprinter(req)
	if req.Body == nil || req.Body == http.NoBody {
		return fh.sum(), nil, nil
	}
	// The route's body-limit middleware, which runs first, caps what is
	// buffered here.
	sp = &spool{}
	_, err = sp.fill(io.TeeReader(req.Body, fh))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		sp.remove()
		return nil, nil, echo.ErrStatusRequestEntityTooLarge
	case err != nil:
		sp.remove()
		return nil, nil, err
	}
	body, err := sp.reader()
	if err != nil {
		sp.remove()
		return nil, nil, err
	}
	req.Body = replayBody{Reader: body, mem: sp.memory(), orig: req.Body}
	return fh.sum(), sp, nil
}

// spool holds a body: the first spoolMemory bytes in memory, all of it in
// a temporary file once it grows past that.
type spool struct {
	mem  bytes.Buffer
	file *os.File
}

// fill reads r to its end into the spool. Up to spoolMemory bytes are read
// straight into memory, with no copy buffer in between: most keyed bodies
// are a few hundred bytes of JSON, and io.Copy would allocate 32 KB for
// each (the body limit's reader offers it no shortcut). A larger body
// moves to a temporary file, and the rest is copied after it.
func (sp *spool) fill(r io.Reader) (int64, error) {
	n, err := sp.mem.ReadFrom(io.LimitReader(r, spoolMemory+1))
	if err != nil || n <= spoolMemory {
		return n, err
	}
	f, err := os.CreateTemp("", "escrowd-request-*")
	if err != nil {
		return n, err
	}
	sp.file = f
	if _, err := f.Write(sp.mem.Bytes()); err != nil {
		return n, err
	}
	sp.mem = bytes.Buffer{}
	m, err := io.Copy(f, r)
	return n + m, err
}

// reader reads the body back from its start.
func (sp *spool) reader() (io.Reader, error) {
	if sp.file == nil {
		return bytes.NewReader(sp.mem.Bytes()), nil
	}
	if _, err := sp.file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return sp.file, nil
}

// memory is the body when the spool holds it in memory; nil when it is in
// a file.
func (sp *spool) memory() []byte {
	if sp.file != nil {
		return nil
	}
	return sp.mem.Bytes()
}

// remove deletes the temporary file, if any; nil-safe and idempotent.
func (sp *spool) remove() {
	if sp == nil || sp.file == nil {
		return
	}
	_ = sp.file.Close()
	_ = os.Remove(sp.file.Name())
	sp.file = nil
}

// replayBody serves the spooled bytes and closes the original body. mem is
// the whole body when the spool holds it in memory, so a JSON decoder
// reads it where it is instead of copying it once more.
type replayBody struct {
	io.Reader
	mem  []byte
	orig io.Closer
}
