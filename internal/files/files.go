// Package files stores uploaded files (escrow images, dispute evidence,
// category images) under unguessable names in a store every instance
// shares (a Backend) and serves them back. The content type is
// always the one sniffed from the bytes, never the type the client declares, and is
// encoded in the file's extension so nothing else needs to be stored.
package files

import (
	"bytes"
	"context"
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

// Store names, checks and keeps uploaded files in a Backend shared by every
// instance, and hands out their public URLs. A name is "owner/file": each
// owner's files (Owner) count against their quota together.
type Store struct {
	backend   Backend
	publicURL string
	quota     int64
	usage     *usage
	folder    string // ServeFolder
}

// New is a store over backend; publicURL is the base of the URLs it hands
// out; quota bounds each owner's files in bytes (0: no bound).
func New(backend Backend, publicURL string, quota int64) *Store {
	return &Store{backend: backend, publicURL: strings.TrimRight(publicURL, "/"), quota: quota, usage: newUsage(backend)}
}

// Backend is where the store keeps the bytes.
func (s *Store) Backend() Backend { return s.backend }

// URL is the public URL of a stored name ("owner/file", or "file" for a
// file stored before files had owners).
func (s *Store) URL(name string) string { return s.publicURL + "/files/" + name }

// NameOf is the stored name a URL this store handed out refers to; false
// for any other URL.
func (s *Store) NameOf(u string) (string, bool) {
	name, ok := strings.CutPrefix(u, s.publicURL+"/files/")
	if !ok || !ValidName(name) {
		return "", false
	}
	return name, true
}

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
func (s *Store) SaveImages(ctx context.Context, owner string, headers []*multipart.FileHeader) (urls []string, err error) {
	names := make([]string, 0, len(headers))
	defer func() {
		if err != nil {
			for _, n := range names {
				s.removeName(context.WithoutCancel(ctx), n)
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
		name, err := s.write(ctx, owner, data, ext)
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
func (s *Store) SaveEvidence(ctx context.Context, owner string, h *multipart.FileHeader) (string, error) {
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
	name, err := s.write(ctx, owner, data, ext)
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

// write stores data under a fresh random name in owner's folder and
// returns that name ("owner/file"). A file that would take the owner past
// the quota is ErrQuota.
func (s *Store) write(ctx context.Context, owner string, data []byte, ext string) (string, error) {
	if !ownerName.MatchString(owner) {
		return "", fmt.Errorf("files: invalid owner %q", owner)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("files: random name: %w", err)
	}
	name := owner + "/" + hex.EncodeToString(id[:]) + "." + ext
	release, err := s.usage.reserve(ctx, owner, int64(len(data)), s.quota)
	if err != nil {
		return "", err
	}
	err = s.backend.Put(ctx, NewObject(name, data))
	release(err == nil)
	if err != nil {
		return "", err
	}
	return name, nil
}

// Open returns a stored file with its content type and the time it was
// stored. Only names this store hands out are accepted; anything else
// (other extensions, upper case, paths) is ErrNotFound.
func (s *Store) Open(ctx context.Context, name string) (f io.ReadSeekCloser, contentType string, modTime time.Time, err error) {
	if !ValidName(name) {
		return nil, "", time.Time{}, ErrNotFound
	}
	o, err := s.backend.Get(ctx, name)
	if errors.Is(err, ErrNotFound) && s.folder != "" {
		return s.openInFolder(name)
	}
	if err != nil {
		return nil, "", time.Time{}, err
	}
	return nopCloser{bytes.NewReader(o.Data)}, typeOfName(name), o.Created, nil
}

// ServeFolder makes the store also serve the files of dir, the folder an
// older server kept files in on its own disk (<ESCROW_DATA_DIR>/files), as
// long as they are not moved into the backend (Move), and remove them there
// with the rest: nothing it served before goes missing, and a deleted
// escrow's files still go. Only this instance's folder is seen.
func (s *Store) ServeFolder(dir string) { s.folder = dir }

// openInFolder opens name in the folder; ErrNotFound when it is not there
// as a regular file.
func (s *Store) openInFolder(name string) (io.ReadSeekCloser, string, time.Time, error) {
	f, err := os.Open(filepath.Join(s.folder, filepath.FromSlash(name)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", time.Time{}, ErrNotFound
	}
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("files: open: %w", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, "", time.Time{}, ErrNotFound
	}
	return f, typeOfName(name), st.ModTime(), nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// ValidName reports whether name is one a store hands out: "owner/file"
// (or "file", stored before files had owners) with a known extension.
func ValidName(name string) bool {
	owner, file, hasOwner := strings.Cut(name, "/")
	if !hasOwner {
		file = owner
	} else if !ownerName.MatchString(owner) {
		return false
	}
	return storedName.MatchString(file)
}

// typeOfName is the content type of a valid name, by its extension.
func typeOfName(name string) string {
	return extType[name[strings.LastIndexByte(name, '.')+1:]]
}

// Remove deletes the files behind URLs this store handed out (cleanup after
// a command that failed once its images were saved, or an escrow's files
// once it is deleted). Other URLs and missing files are ignored; the
// first failure to delete is returned (what it left, orphan collection
// removes).
func (s *Store) Remove(ctx context.Context, urls []string) error {
	var first error
	for _, u := range urls {
		if name, ok := s.NameOf(u); ok {
			if err := s.removeName(ctx, name); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// RemoveName deletes one stored name's file and gives its bytes back to
// its owner's quota.
func (s *Store) removeName(ctx context.Context, name string) error {
	n, err := s.backend.Delete(ctx, name)
	if err == nil && n > 0 {
		s.usage.release(ownerOf(name), n)
	}
	if s.folder != "" {
		if rerr := os.Remove(filepath.Join(s.folder, filepath.FromSlash(name))); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("files: remove: %w", rerr)
		}
	}
	return err
}
