// Package files stores uploaded files (escrow images, dispute evidence) on
// disk under unguessable names and serves them back. The content type is
// always the one sniffed from the bytes, never the type the client declares, and is
// encoded in the file's extension so nothing else needs to be stored.
package files

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/escrowd/escrowd/domain"
)

// MaxImageBytes is the size limit of one uploaded image.
const MaxImageBytes = 5 << 20

// The client-facing errors of an upload.
var (
	ErrNotImage     = &domain.Error{Code: domain.Invalid, Message: "imageUrl must be PNG, JPEG, WebP or GIF images"}
	ErrTooLarge     = &domain.Error{Code: domain.TooLarge, Message: "Each image must be at most 5 MB"}
	ErrNotFound     = &domain.Error{Code: domain.NotFound, Message: "File not found"}
	imageExt        = map[string]string{"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}
	ErrNotEvidence  = &domain.Error{Code: domain.Invalid, Message: "file must be a PNG, JPEG, WebP or GIF image or a PDF"}
	ErrEvidenceSize = &domain.Error{Code: domain.TooLarge, Message: "file must be at most 5 MB"}
	// evidenceExt is what dispute evidence may be: an image or a PDF.
	evidenceExt = map[string]string{"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif", "application/pdf": "pdf"}
	extType     = map[string]string{"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp", "gif": "image/gif", "pdf": "application/pdf"}
	storedName  = regexp.MustCompile(`^[0-9a-f]{32}\.(png|jpg|webp|gif|pdf)$`)
	// ErrQuota refuses a file past its owner's storage quota.
	ErrQuota      = &domain.Error{Code: domain.TooLarge, Message: "Storage quota exceeded"}
	errReadFailed = errors.New("files: reading the upload failed")
)

// Store keeps files in one directory and names them by public URL. Each
// owner's files sit in a folder of their own (named by Owner), which is
// what their quota counts.
type Store struct {
	dir, publicURL string
	quota          int64
	usage          *usage
}

// New opens (creating if needed) the store under <dataDir>/files; publicURL
// is the base of the URLs it hands out; quota bounds each owner's files in
// bytes (0: no bound).
func New(dataDir, publicURL string, quota int64) (*Store, error) {
	dir := filepath.Join(dataDir, "files")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("files: create %s: %w", dir, err)
	}
	collectUnfinished(dir, time.Now().Add(-unfinishedAge))
	return &Store{dir: dir, publicURL: strings.TrimRight(publicURL, "/"), quota: quota, usage: newUsage(dir)}, nil
}

// URL is the public URL of a stored name ("owner/file", or "file" for a
// file stored before files had owners).
func (s *Store) URL(name string) string { return s.publicURL + "/files/" + name }

// ImagesFrom returns the files a form sent under imageUrl (or imageUrl[]),
// refusing more than max.
func ImagesFrom(form *multipart.Form, field string, max int) ([]*multipart.FileHeader, error) {
	if form == nil {
		return nil, nil
	}
	var out []*multipart.FileHeader
	out = append(out, form.File[field]...)
	out = append(out, form.File[field+"[]"]...)
	if len(out) > max {
		return nil, domain.Invalidf("%s accepts at most %d images", field, max)
	}
	return out, nil
}

// SaveImages stores every file as an image and returns their public URLs:
// all or none, so a refused file leaves nothing behind.
func (s *Store) SaveImages(owner string, headers []*multipart.FileHeader) (urls []string, err error) {
	names := make([]string, 0, len(headers))
	defer func() {
		if err != nil {
			for _, n := range names {
				s.removeName(n)
			}
			urls = nil
		}
	}()
	for _, h := range headers {
		data, err := readCapped(h)
		if err != nil {
			return nil, err
		}
		ext, ok := imageExt[sniff(data)]
		if !ok {
			return nil, ErrNotImage
		}
		name, err := s.write(owner, data, ext)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	urls = make([]string, len(names))
	for i, n := range names {
		urls[i] = s.URL(n)
	}
	return urls, nil
}

// SaveEvidence stores one dispute evidence file (an image or a PDF, by its
// content) and returns its public URL.
func (s *Store) SaveEvidence(owner string, h *multipart.FileHeader) (string, error) {
	data, err := readCapped(h)
	if errors.Is(err, ErrTooLarge) {
		return "", ErrEvidenceSize
	}
	if err != nil {
		return "", err
	}
	ext, ok := evidenceExt[sniff(data)]
	if !ok {
		return "", ErrNotEvidence
	}
	name, err := s.write(owner, data, ext)
	if err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// readCapped reads at most MaxImageBytes+1 bytes whatever the header
// says, so an oversized file is detected without reading all of it.
func readCapped(h *multipart.FileHeader) ([]byte, error) {
	if h.Size > MaxImageBytes {
		return nil, ErrTooLarge
	}
	f, err := h.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errReadFailed, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxImageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errReadFailed, err)
	}
	if len(data) > MaxImageBytes {
		return nil, ErrTooLarge
	}
	return data, nil
}

// sniff is the content type of data by its first bytes only.
func sniff(data []byte) string {
	if len(data) >= 12 && bytes.Equal(data[0:4], []byte("RIFF")) && bytes.Equal(data[8:12], []byte("WEBP")) {
		return "image/webp"
	}
	return http.DetectContentType(data)
}

// write stores data atomically (temp file, then rename) under a fresh
// random name in owner's folder and returns that name ("owner/file"). A
// file that would take the owner past the quota is ErrQuota.
func (s *Store) write(owner string, data []byte, ext string) (string, error) {
	if !ownerName.MatchString(owner) {
		return "", fmt.Errorf("files: invalid owner %q", owner)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("files: random name: %w", err)
	}
	file := hex.EncodeToString(id[:]) + "." + ext
	name := owner + "/" + file
	dir := filepath.Join(s.dir, owner)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("files: %w", err)
	}
	release, err := s.usage.reserve(owner, int64(len(data)), s.quota)
	if err != nil {
		return "", err
	}
	committed := false
	defer func() { release(committed) }()
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return "", fmt.Errorf("files: %w", err)
	}
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return "", fmt.Errorf("files: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("files: sync: %w", err)
	}
	if err := tmp.Chmod(0o640); err != nil {
		return "", fmt.Errorf("files: chmod: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("files: close: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, file)); err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("files: rename: %w", err)
	}
	committed = true
	return name, nil
}

// Open returns a stored file with its content type and modification time.
// Only names this store hands out are accepted; anything else (other
// extensions, upper case, paths) is ErrNotFound.
func (s *Store) Open(name string) (f io.ReadSeekCloser, contentType string, modTime time.Time, err error) {
	path, ext, ok := s.path(name)
	if !ok {
		return nil, "", time.Time{}, ErrNotFound
	}
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", time.Time{}, ErrNotFound
	}
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("files: open: %w", err)
	}
	st, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, "", time.Time{}, fmt.Errorf("files: stat: %w", err)
	}
	if !st.Mode().IsRegular() {
		_ = file.Close()
		return nil, "", time.Time{}, ErrNotFound
	}
	return file, extType[ext], st.ModTime(), nil
}

// path is where a stored name ("owner/file" or "file") lies, with the
// file's extension; false for any name this store does not hand out.
func (s *Store) path(name string) (path, ext string, ok bool) {
	owner, file, hasOwner := strings.Cut(name, "/")
	if !hasOwner {
		owner, file = "", name
	} else if !ownerName.MatchString(owner) {
		return "", "", false
	}
	m := storedName.FindStringSubmatch(file)
	if m == nil {
		return "", "", false
	}
	return filepath.Join(s.dir, owner, file), m[1], true
}

// Remove deletes the files behind URLs this store handed out (cleanup after
// a command that failed once its images were saved). Other URLs and
// missing files are ignored.
func (s *Store) Remove(urls []string) {
	prefix := s.publicURL + "/files/"
	for _, u := range urls {
		if name, ok := strings.CutPrefix(u, prefix); ok {
			s.removeName(name)
		}
	}
}

// removeName deletes a stored name's file and gives its bytes back to
// its owner's quota.
func (s *Store) removeName(name string) {
	path, _, ok := s.path(name)
	if !ok {
		return
	}
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() {
		return
	}
	if os.Remove(path) == nil {
		if owner, _, found := strings.Cut(name, "/"); found {
			s.usage.release(owner, st.Size())
		}
	}
}
