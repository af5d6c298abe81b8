package files

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Collected counts what Collect removed (or, in a dry run, would remove).
type Collected struct {
	// Checked is how many stored files were old enough to be considered.
	Checked int
	// Orphans are the files nothing refers to.
	Orphans int
	Bytes   int64
}

// References are the stored names the records refer to: Has reports one.
type References interface {
	Has(name string) bool
}

// CollectEach is told of every orphan Collect finds; nil is quiet.
type CollectEach func(Info)

// Collect removes the stored files that nothing refers to (of the names a
// store hands out; nothing else in the backend is touched): a deleted or
// expired escrow's, a replaced category image, an upload whose command
// failed in a process that stopped before removing it. Only files stored
// before before are considered (a file is stored before the command that
// refers to it is appended, so a younger one may be about to be referred
// to). The files are listed first and references is called after: it must
// answer from records that include every command appended before it was
// called (read models caught up to the log's head as of then), so that any
// listed file a command kept is seen as referred to. Removing a file also
// gives its bytes back to its owner's quota (the next measure sees it).
func Collect(ctx context.Context, backend Backend, before time.Time, references func(context.Context) (References, error),
	dryRun bool, each CollectEach) (Collected, error) {
	var c Collected
	var candidates []Info
	err := backend.List(ctx, func(i Info) error {
		// Only names a store hands out: whatever else shares a bucket is
		// not the service's to remove.
		if ValidName(i.Name) && i.Created.Before(before) {
			candidates = append(candidates, i)
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	c.Checked = len(candidates)
	if len(candidates) == 0 {
		return c, nil
	}
	refs, err := references(ctx)
	if err != nil {
		return c, fmt.Errorf("files: the records files are referred to from: %w", err)
	}
	for _, i := range candidates {
		if refs.Has(i.Name) {
			continue
		}
		if !dryRun {
			if _, err := backend.Delete(ctx, i.Name); err != nil {
				return c, err
			}
		}
		c.Orphans++
		c.Bytes += i.Size
		if each != nil {
			each(i)
		}
	}
	return c, nil
}

// NameSet is a References of stored names.
type NameSet map[string]struct{}

func (s NameSet) Has(name string) bool { _, ok := s[name]; return ok }

// AddURL adds the stored name a file URL refers to, whatever its scheme and
// host (the service's public URL may have changed since it was handed
// out): the path's part after /files/, when it is a name a store hands out.
// Keeping a file too many is harmless; collecting one a record still shows
// is not.
func (s NameSet) AddURL(u string) {
	p, err := url.Parse(u)
	if err != nil {
		return
	}
	i := strings.LastIndex(p.Path, "/files/")
	if i < 0 {
		return
	}
	if rest := p.Path[i+len("/files/"):]; ValidName(rest) {
		s[rest] = struct{}{}
	}
}
