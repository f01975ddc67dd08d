package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Removing trees, for template delete and garbage collection.
//
// The database decides which templates are dead (internal/template/gc); this
// file only removes trees, under a lock that keeps removal apart from
// importers: an importer holds a Guard (a shared flock on <dir>/gc.lock) from
// before its import until it has recorded the template in the database, and
// Remove takes the lock exclusively, without waiting, around its last check
// and the rename that takes the tree out of blobs/. So a tree whose row an
// importer is bringing back (PutTemplate clears a tombstone) is never
// removed under it: either the importer found the tree gone and published it
// again, or the check sees the revived row.

// ErrBusy: Remove could not take the removal lock because an import holds a
// Guard; try again later.
var ErrBusy = errors.New("template store busy: an import is running")

// openGCLock opens the lock file that Guard (shared) and Remove
// (exclusive) take.
func (s *Store) openGCLock() (*os.File, error) {
	return os.OpenFile(filepath.Join(s.dir, "gc.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}

// Guard keeps Remove from removing any tree until release is called. Hold it
// across an import and the recording of its result (PutTemplate, tags).
// Several guards may be held at once, also by other processes sharing the
// directory; it waits only while a Remove is between its check and rename.
func (s *Store) Guard(ctx context.Context) (release func(), err error) {
	f, err := s.openGCLock()
	if err != nil {
		return nil, fmt.Errorf("template store guard: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			break
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("template store guard: %w", err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// Tree is a template tree on disk.
type Tree struct {
	Digest model.TemplateDigest
	// Published is when the tree appeared under blobs/ (the later of its
	// directory's change and modification times).
	Published time.Time
}

// Trees lists the trees under blobs/, sorted by digest, without reading or
// checking their manifests.
func (s *Store) Trees() ([]Tree, error) {
	ents, err := os.ReadDir(s.blobsDir())
	if err != nil {
		return nil, fmt.Errorf("list template trees: %w", err)
	}
	var out []Tree
	for _, ent := range ents {
		hexPart, ok := strings.CutPrefix(ent.Name(), "sha256-")
		d, perr := model.ParseTemplateDigest("sha256:" + hexPart)
		if !ok || perr != nil || !ent.IsDir() {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(s.blobsDir(), ent.Name()), &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			return nil, fmt.Errorf("list template trees: %w", err)
		}
		published := time.Unix(st.Mtim.Unix())
		if c := time.Unix(st.Ctim.Unix()); c.After(published) {
			published = c
		}
		out = append(out, Tree{Digest: d, Published: published})
	}
	slices.SortFunc(out, func(a, b Tree) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	return out, nil
}

// Remove removes template d's tree if check, called while no import holds
// a Guard, reports that it may go. It reports whether it removed the tree:
// false without error if d has no tree or check said no; ErrBusy if an
// import holds a Guard. The tree leaves blobs/ in one rename, into
// staging/, and is deleted there, so a crash never leaves a half tree under
// blobs/ (Open cleans staging).
func (s *Store) Remove(ctx context.Context, d model.TemplateDigest, check func(context.Context) (bool, error)) (bool, error) {
	src := s.blobDir(d)
	if src == "" {
		return false, fmt.Errorf("%w: template digest %q", model.ErrInvalid, textclip.Bytes(string(d), maxEcho))
	}
	f, err := s.openGCLock()
	if err != nil {
		return false, fmt.Errorf("remove template %s: %w", d, err)
	}
	locked := true
	unlock := func() {
		if locked {
			f.Close()
			locked = false
		}
	}
	defer unlock()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, ErrBusy
		}
		return false, fmt.Errorf("remove template %s: lock: %w", d, err)
	}
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	ok, err := check(ctx)
	if err != nil || !ok {
		return false, err
	}
	dst, err := os.MkdirTemp(s.stagingDir(), "remove-")
	if err != nil {
		return false, fmt.Errorf("remove template %s: %w", d, err)
	}
	if err := os.Rename(src, filepath.Join(dst, "blob")); err != nil {
		_ = os.Remove(dst)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove template %s: %w", d, err)
	}
	unlock()
	s.defMu.Lock()
	delete(s.defaults, d)
	s.defMu.Unlock()
	if err := atomicfile.SyncDir(s.blobsDir()); err != nil {
		s.logger.Warn("template store: sync after remove", "digest", d, "err", err)
	}
	if err := os.RemoveAll(dst); err != nil {
		// The tree is out of blobs/; Open removes what is left.
		s.logger.Error("template store: cannot delete removed tree", "digest", d, "path", dst, "err", err)
	}
	s.logger.Info("template removed", "digest", d)
	return true, nil
}
