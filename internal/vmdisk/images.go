package vmdisk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/filelock"
)

// BlockSize is the block size of the ext4 filesystems in template images.
const BlockSize = 4096

// MinImageSize is the smallest image Images.Image makes (the journal must
// fit a few times over).
const MinImageSize = 64 << 20

// Filesystem parameters of template images. The guest kernel (Debian 6.1)
// mounts every feature read-write; orphan_file and other post-6.1 features
// are left out, and the list is given whole ("none" first) so the host's
// /etc/mke2fs.conf cannot add any.
const (
	ext4Features = "none,has_journal,ext_attr,dir_index,filetype,extent,64bit,flex_bg," +
		"sparse_super,large_file,huge_file,dir_nlink,extra_isize,metadata_csum"
	inodeSize     = 256
	bytesPerInode = 16384
	// journalMiB: a sandbox's root is written by a guest that can be killed
	// at any moment (VM killed, host OOM) and frozen into a base snapshot
	// mid-write; the journal makes the filesystem consistent on the next
	// mount instead of leaving the clone to fsck. 16 MiB instead of mke2fs's
	// 32–64 MiB for 1–4 GiB: each clone ends up owning the journal blocks
	// the guest wrote, so the journal's size is a per-sandbox host cost.
	journalMiB = 16
)

// mkfsTimeout bounds one mkfs.ext4 run when ctx has no earlier deadline:
// populating the image from a large tree takes a while.
const mkfsTimeout = 10 * time.Minute

// Images builds and caches template disk images in one directory. Several
// Images (in one process or several) may share a directory.
type Images struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	locks map[string]*nameLock // per image name, while someone holds or waits
}

type nameLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

// NewImages returns an Images caching in dir (made, 0700, if missing).
// log may be nil.
func NewImages(dir string, log *slog.Logger) (*Images, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Images{dir: abs, log: log, locks: map[string]*nameLock{}}, nil
}

// Dir is the cache directory (absolute).
func (im *Images) Dir() string { return im.dir }

// meta is an image's sidecar file, written before the image appears.
type meta struct {
	Key       string    `json:"key"`
	Size      int64     `json:"size"`
	Tree      string    `json:"tree"`
	TreeBytes int64     `json:"tree_bytes"`
	Built     time.Time `json:"built"`
}

const (
	imageExt = ".ext4"
	metaExt  = ".json"
	lockExt  = ".lock"
	tmpMark  = ".tmp-"
)

var plainKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:-]{0,99}$`)

// imageName is the file name (without extension) of key's image of size
// bytes: the key itself when it is short and made of [A-Za-z0-9.:-]
// (":" becomes "_", as in "sha256_…"; and not containing ".ext4" or ".tmp",
// which could be taken for another image's files), else the SHA-256 of the
// key. The "k-"/"h-" prefix keeps the two kinds apart.
func imageName(key string, size int64) string {
	if plainKey.MatchString(key) && !strings.Contains(key, ".ext4") && !strings.Contains(key, ".tmp") {
		return fmt.Sprintf("k-%s-%d", strings.ReplaceAll(key, ":", "_"), size)
	}
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("h-%s-%d", hex.EncodeToString(sum[:]), size)
}

// Image returns the path of a read-only (0444) raw ext4 image of the
// directory tree, size bytes long (rounded up to BlockSize; the file is
// sparse and takes about the tree's size on the host), building it on the
// first call for key and size. key is a caller-chosen stable name of the
// tree's content (e.g. the template digest): a later call with the same key
// and size returns the cached image whatever tree it names. Any key works;
// one with characters other than [A-Za-z0-9.:-], or over 100 bytes, is
// hashed into the file name.
//
// The filesystem keeps the tree's ownership, modes (setuid, sticky),
// symlinks, hard links, device nodes, xattrs and mtimes (mkfs.ext4 -d);
// the caller must be able to read every file (root). It has a 16 MiB
// journal, no reserved blocks and zeroed inode tables (the guest kernel
// does not initialise them lazily into every clone).
//
// Concurrent callers for the same key and size, in this process or others
// sharing the directory, build it once: the others wait (until ctx is done)
// and get the same path. The image is built in a temporary file, synced and
// renamed into place, so a partial build (a crash, a failure, ctx done) is
// never returned; its leftover is removed by the next build of that key.
//
// Errors: tree missing or not a directory; size below MinImageSize; size
// too small for the tree (the error names the tree's size and the smallest
// size that fits) — in each case nothing is left in the cache.
func (im *Images) Image(ctx context.Context, key, tree string, size int64) (string, error) {
	if size < MinImageSize {
		return "", fmt.Errorf("image %q: size %d is below the minimum of %d bytes", key, size, MinImageSize)
	}
	size = (size + BlockSize - 1) / BlockSize * BlockSize
	name := imageName(key, size)
	path := filepath.Join(im.dir, name+imageExt)
	if ok, err := complete(path, size); ok || err != nil {
		return path, err
	}
	unlock, err := im.lock(ctx, name)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", key, err)
	}
	defer unlock()
	if ok, err := complete(path, size); ok || err != nil {
		return path, err // built meanwhile
	}
	if err := im.build(ctx, key, tree, name, size); err != nil {
		// Leave nothing behind; the lock file goes while still locked (see remove).
		_ = os.Remove(filepath.Join(im.dir, name+lockExt))
		return "", fmt.Errorf("image %q of %s: %w", key, tree, err)
	}
	return path, nil
}

// complete reports whether path is a finished image of size bytes. Only
// finished images are ever renamed to an image name, so anything else there
// (a file someone tampered with) is an error rather than rebuilt over.
func complete(path string, size int64) (bool, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cached image: %w", err)
	}
	if !st.Mode().IsRegular() || st.Size() != size || st.Mode().Perm() != 0o444 {
		return false, fmt.Errorf("cached image %s is not a finished image (mode %s, %d bytes, expected %d): remove it", path, st.Mode(), st.Size(), size)
	}
	return true, nil
}

// build makes the image name of tree, holding name's lock.
func (im *Images) build(ctx context.Context, key, tree, name string, size int64) (err error) {
	start := time.Now()
	im.removeLeftovers(name)
	ts, err := measureTree(ctx, tree)
	if err != nil {
		return err
	}
	if need := ts.minImageSize(); size < need {
		return fmt.Errorf("size %d bytes is too small for the tree, which takes %d bytes (%d inodes); an ext4 image of it needs at least %d bytes",
			size, ts.bytes, ts.inodes, need)
	}
	f, err := os.CreateTemp(im.dir, name+imageExt+tmpMark+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Truncate(size); err != nil {
		return err
	}
	if _, err := run(ctx, mkfsTimeout, "mkfs.ext4", "-q", "-F",
		"-b", fmt.Sprint(BlockSize), "-I", fmt.Sprint(inodeSize), "-i", fmt.Sprint(bytesPerInode),
		"-m", "0", "-O", ext4Features, "-J", fmt.Sprintf("size=%d", journalMiB),
		"-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard",
		"-d", tree, tmp); err != nil {
		return fmt.Errorf("tree of %d bytes (%d inodes) in %d: %w", ts.bytes, ts.inodes, size, err)
	}
	if err := f.Chmod(0o444); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	f = nil
	m, err := json.Marshal(meta{Key: key, Size: size, Tree: tree, TreeBytes: ts.bytes, Built: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(im.dir, name+metaExt), m, 0o644); err != nil {
		return err
	}
	path := filepath.Join(im.dir, name+imageExt)
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(im.dir); err != nil {
		return err
	}
	im.log.Info("built template image", "key", key, "path", path, "size", size,
		"tree", tree, "tree_bytes", ts.bytes, "inodes", ts.inodes, "took", time.Since(start))
	return nil
}

// removeLeftovers removes the temporary files of failed builds of name
// (name's lock is held, so no build of it is under way).
func (im *Images) removeLeftovers(name string) {
	old, _ := filepath.Glob(filepath.Join(im.dir, name+imageExt+tmpMark+"*"))
	for _, p := range old {
		if err := os.Remove(p); err == nil {
			im.log.Warn("removed a partial template image", "path", p)
		}
	}
}

// Prune removes the cached images whose key keep rejects (with their
// sidecar, lock and leftover files), and images whose key is unknown (no
// sidecar), and sidecars left without their image by a crash, and returns
// the paths of the images removed. It takes each
// image's lock, so it waits for a build of it under way. A running VM that
// has the image open keeps reading it: the file goes when it is closed.
func (im *Images) Prune(ctx context.Context, keep func(key string) bool) ([]string, error) {
	entries, err := os.ReadDir(im.dir)
	if err != nil {
		return nil, fmt.Errorf("prune images: %w", err)
	}
	// Images, and sidecars whose image never appeared (a crash between the two).
	var names []string
	seen := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), imageExt)
		if !ok {
			name, ok = strings.CutSuffix(e.Name(), metaExt)
		}
		if ok && (strings.HasPrefix(name, "k-") || strings.HasPrefix(name, "h-")) && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	var removed []string
	var errs []error
	for _, name := range names {
		if b, err := os.ReadFile(filepath.Join(im.dir, name+metaExt)); err == nil {
			var m meta
			if json.Unmarshal(b, &m) == nil && keep(m.Key) {
				continue
			}
		}
		ok, err := im.remove(ctx, name)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, filepath.Join(im.dir, name+imageExt))
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("prune images: %w", err)
	}
	return removed, nil
}

// remove deletes image name and its companions under its lock, and reports
// whether the image was there.
func (im *Images) remove(ctx context.Context, name string) (bool, error) {
	unlock, err := im.lock(ctx, name)
	if err != nil {
		return false, err
	}
	defer unlock()
	im.removeLeftovers(name)
	err = os.Remove(filepath.Join(im.dir, name+imageExt))
	gone := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Remove(filepath.Join(im.dir, name+metaExt)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return gone, err
	}
	// The lock file goes last, still locked: filelock.Lock checks that the
	// file it locked is still the one at its path.
	if err := os.Remove(filepath.Join(im.dir, name+lockExt)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return gone, err
	}
	return gone, atomicfile.SyncDir(im.dir)
}

// lock takes name's lock: first in the process (a channel, so ctx can end
// the wait), then across processes (flock on name.lock).
func (im *Images) lock(ctx context.Context, name string) (unlock func(), err error) {
	im.mu.Lock()
	l := im.locks[name]
	if l == nil {
		l = &nameLock{ch: make(chan struct{}, 1)}
		im.locks[name] = l
	}
	l.refs++
	im.mu.Unlock()
	release := func() {
		im.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(im.locks, name)
		}
		im.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("wait for the lock of %s: %w", name, ctx.Err())
	}
	f, err := filelock.Lock(ctx, filepath.Join(im.dir, name+lockExt))
	if err != nil {
		<-l.ch
		release()
		return nil, err
	}
	return func() {
		f.Close() // drops the flock
		<-l.ch
		release()
	}, nil
}
