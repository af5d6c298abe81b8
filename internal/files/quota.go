package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sync"
	"time"
)

// ownerName is the folder name of an owner's files (Owner).
var ownerName = regexp.MustCompile(`^[0-9a-f]{16}$`)

// Owner is the folder of a merchant environment's files: a digest, so a
// file's URL names no merchant.
func Owner(merchantID, environment string) string {
	sum := sha256.Sum256([]byte(merchantID + "\x00" + environment))
	return hex.EncodeToString(sum[:8])
}

// usageTTL is how long a measured usage is trusted before the store is
// measured again: other instances sharing the store write to it too.
const usageTTL = time.Minute

// usage is each owner's stored bytes. A reservation counts a file before
// it is written, so concurrent uploads to one instance cannot pass the
// quota together.
type usage struct {
	backend Backend
	mu      sync.Mutex
	by      map[string]*ownerUsage
}

type ownerUsage struct {
	bytes      int64
	measuredAt time.Time
}

func newUsage(b Backend) *usage { return &usage{backend: b, by: map[string]*ownerUsage{}} }

// reserve counts n more bytes for owner, or refuses them with ErrQuota
// past quota (0: no quota). release(kept) gives them back unless the file
// was kept.
func (u *usage) reserve(ctx context.Context, owner string, n, quota int64) (release func(kept bool), err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ou := u.by[owner]
	if ou == nil || time.Since(ou.measuredAt) > usageTTL {
		stored, err := u.backend.Usage(ctx, owner)
		if err != nil {
			return nil, err
		}
		ou = &ownerUsage{bytes: stored, measuredAt: time.Now()}
		u.by[owner] = ou
	}
	if quota > 0 && ou.bytes+n > quota {
		return nil, ErrQuota
	}
	ou.bytes += n
	return func(kept bool) {
		if !kept {
			u.release(owner, n)
		}
	}, nil
}

// release gives n bytes back to owner.
func (u *usage) release(owner string, n int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ou := u.by[owner]; ou != nil {
		ou.bytes = max(0, ou.bytes-n)
	}
}
