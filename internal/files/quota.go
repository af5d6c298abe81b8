package files

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// usageTTL is how long a measured usage is trusted before the folder is
// measured again: other instances sharing the folder write to it too.
const usageTTL = time.Minute

// usage is each owner's stored bytes. A reservation counts a file before
// it is written, so concurrent uploads cannot pass the quota together.
type usage struct {
	dir string
	mu  sync.Mutex
	by  map[string]*ownerUsage
}

type ownerUsage struct {
	bytes      int64
	measuredAt time.Time
}

func newUsage(dir string) *usage { return &usage{dir: dir, by: map[string]*ownerUsage{}} }

// reserve counts n more bytes for owner, or refuses them with ErrQuota
// past quota (0: no quota). release(kept) gives them back unless the file
// was kept.
func (u *usage) reserve(owner string, n, quota int64) (release func(kept bool), err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ou := u.by[owner]
	if ou == nil || time.Since(ou.measuredAt) > usageTTL {
		ou = &ownerUsage{bytes: measure(filepath.Join(u.dir, owner)), measuredAt: time.Now()}
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

// measure sums the stored files of a folder (uploads in progress, the
// temporary files, are counted by their reservation instead).
func measure(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total int64
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			total += info.Size()
		}
	}
	return total
}

// unfinishedAge is how old an upload's temporary file must be to be taken
// for one a crashed process left: no upload takes that long.
const unfinishedAge = time.Hour

// collectUnfinished removes the temporary files of uploads that never
// finished (the process stopped mid-write), older than before, in the
// store's folder and every owner's.
func collectUnfinished(dir string, before time.Time) {
	dirs := []string{dir}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if e.IsDir() && ownerName.MatchString(e.Name()) {
				dirs = append(dirs, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".upload-") || !e.Type().IsRegular() {
				continue
			}
			if info, err := e.Info(); err == nil && info.ModTime().Before(before) {
				_ = os.Remove(filepath.Join(d, e.Name()))
			}
		}
	}
}
