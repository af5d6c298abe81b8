package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Moved counts what Move did, file by file.
type Moved struct {
	// Moved files are in the store, verified, and gone from the folder.
	Moved int
	// Bytes is the size of the moved files.
	Bytes int64
	// Conflicts are files the store holds other bytes under the same
	// name: left in the folder, reported, never overwritten.
	Conflicts []string
	// Skipped are entries of the folder that are no stored file (an
	// upload's temporary file, anything an operator put there).
	Skipped int
}

// MoveEach is told of every file Move handles, with what became of it
// ("moved", "conflict", "skipped"); nil is quiet.
type MoveEach func(name, outcome string)

// Move moves the files of an old data directory's files folder (dir,
// <ESCROW_DATA_DIR>/files) into backend under the names they were served
// by. Each file is stored, read back and compared by SHA-256 with the
// folder's copy, and only then removed from the folder, so an interrupted
// move loses nothing and running it again carries on where it stopped: a
// file already in the store with the same bytes counts as moved. A file
// whose name the store holds with other bytes is left in place and
// reported (Conflicts). dryRun reports what would be moved and changes
// nothing.
func Move(ctx context.Context, dir string, backend Backend, dryRun bool, each MoveEach) (Moved, error) {
	var m Moved
	if each == nil {
		each = func(string, string) {}
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // nothing was ever stored on disk
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			if path != dir && !ownerName.MatchString(name) {
				m.Skipped++
				each(name+"/", "skipped")
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !ValidName(name) {
			m.Skipped++
			each(name, "skipped")
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("files: read %s: %w", path, err)
		}
		if dryRun {
			m.Moved++
			m.Bytes += int64(len(data))
			each(name, "moved")
			return nil
		}
		o := NewObject(name, data)
		if err := backend.Put(ctx, o); errors.Is(err, ErrExists) {
			m.Conflicts = append(m.Conflicts, name)
			each(name, "conflict")
			return nil
		} else if err != nil {
			return err
		}
		back, err := backend.Get(ctx, name)
		if err != nil {
			return fmt.Errorf("files: read back %s: %w", name, err)
		}
		if sum := sha256.Sum256(back.Data); sum != o.SHA256 || !bytes.Equal(back.SHA256[:], o.SHA256[:]) {
			return fmt.Errorf("files: %s reads back other bytes than were stored; the folder's copy is kept", name)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("files: remove %s after moving it: %w", path, err)
		}
		m.Moved++
		m.Bytes += int64(len(data))
		each(name, "moved")
		return nil
	})
	if err != nil {
		return m, err
	}
	if !dryRun {
		removeEmptyOwnerDirs(dir)
	}
	return m, nil
}

// removeEmptyOwnerDirs removes the owner folders a move emptied.
func removeEmptyOwnerDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && ownerName.MatchString(e.Name()) && !strings.HasPrefix(e.Name(), ".") {
			_ = os.Remove(filepath.Join(dir, e.Name())) // fails unless empty
		}
	}
}
