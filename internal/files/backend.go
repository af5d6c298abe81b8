package files

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"time"
)

// Backend is where stored files' bytes live, shared by every instance of
// the service: the PostgreSQL table (Postgres, the default) or an S3 bucket
// (S3). It keeps bytes under names and decides nothing: which names are
// valid, what a file may be and whose quota it counts against is the
// Store's.
type Backend interface {
	// Put stores o under o.Name unless a file is there already. One with
	// the same bytes (by SHA-256) is not an error, so a repeated Put is
	// harmless; other bytes are ErrExists and are left as they are.
	Put(ctx context.Context, o Object) error
	// Get returns the file stored under name, bytes and all; ErrNotFound
	// when there is none.
	Get(ctx context.Context, name string) (Object, error)
	// Delete removes the file stored under name and returns its size;
	// (0, nil) when there is none.
	Delete(ctx context.Context, name string) (int64, error)
	// Usage is the total size of owner's files.
	Usage(ctx context.Context, owner string) (int64, error)
	// List calls fn with every stored file, in name order, without their
	// bytes; an error from fn stops it and is returned.
	List(ctx context.Context, fn func(Info) error) error
}

// Info is a stored file without its bytes.
type Info struct {
	Name    string
	Size    int64
	Created time.Time
}

// Object is a stored file with its bytes and their SHA-256 digest.
type Object struct {
	Info
	SHA256 [sha256.Size]byte
	Data   []byte
}

// NewObject is data as the file name, with its size and digest.
func NewObject(name string, data []byte) Object {
	return Object{Info: Info{Name: name, Size: int64(len(data))}, SHA256: sha256.Sum256(data), Data: data}
}

// ErrExists refuses a Put over a file of other bytes.
var ErrExists = errors.New("files: another file is stored under that name")

// ownerOf is the owner part of a stored name ("owner/file"); "" for a
// file stored before files had owners.
func ownerOf(name string) string {
	owner, _, ok := strings.Cut(name, "/")
	if !ok {
		return ""
	}
	return owner
}
