package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// meta is the metadata of one entry being staged.
type meta struct {
	mode  uint32 // permission bits including setuid, setgid and sticky (07777)
	uid   int
	gid   int
	mtime time.Time
}

type kind uint8

const (
	kindDir kind = iota + 1
	kindFile
	kindSymlink
)

const maxID = 1<<32 - 2 // largest valid uid/gid ((uid_t)-1 means "unchanged")

// stager builds a tree inside a staging directory. Every write goes through
// an os.Root, so the kernel keeps it inside the directory; on top of that the
// stager tracks what it created and refuses any path whose parent is not a
// directory it made (so nothing is ever written through a symlink), hardlinks
// to anything but a regular file it made, and anything over the limits.
type stager struct {
	rootPath string
	root     *os.Root
	limits   Limits
	kinds    map[string]kind
	dirs     map[string]meta // metadata applied to directories by finish
	entries  int
	bytes    int64
	progress *progressReporter
	buf      []byte

	parentRel  string // cached open parent directory for setting times
	parentFile *os.File
}

func newStager(rootPath string, limits Limits, progress *progressReporter) (*stager, error) {
	root, err := os.OpenRoot(rootPath)
	if err != nil {
		return nil, fmt.Errorf("open staging root: %w", err)
	}
	return &stager{
		rootPath: rootPath,
		root:     root,
		limits:   limits,
		kinds:    map[string]kind{".": kindDir},
		dirs:     map[string]meta{".": {mode: 0o755}},
		entries:  1,
		progress: progress,
		buf:      make([]byte, 256<<10),
	}, nil
}

func (s *stager) close() {
	if s.parentFile != nil {
		s.parentFile.Close()
		s.parentFile = nil
	}
	s.root.Close()
}

// rejectf returns an error for input that cannot become a template.
func rejectf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", model.ErrInvalid, fmt.Sprintf(format, args...))
}

// tooLargef returns an error for input over a limit.
func tooLargef(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", model.ErrInvalid, ErrTooLarge, fmt.Sprintf(format, args...))
}

func (m meta) check(rel string) error {
	if m.uid < 0 || m.uid > maxID || m.gid < 0 || m.gid > maxID {
		return rejectf("%s: owner %d:%d is out of range", rel, m.uid, m.gid)
	}
	return nil
}

// cleanName turns an archive member name into a clean relative path. It
// rejects absolute names, ".." components and NUL bytes; "./" prefixes and
// repeated or trailing slashes are removed. The root is ".".
func cleanName(name string) (string, error) {
	if name == "" {
		return "", rejectf("empty entry name")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", rejectf("entry name %q contains a NUL byte", textclip.Bytes(name, maxEcho))
	}
	if name[0] == '/' {
		return "", rejectf("entry name %q is absolute", textclip.Bytes(name, maxEcho))
	}
	for comp := range strings.SplitSeq(name, "/") {
		if comp == ".." {
			return "", rejectf("entry name %q contains a \"..\" component", textclip.Bytes(name, maxEcho))
		}
	}
	return path.Clean(name), nil
}

// prepare checks that rel may be created as an entry of kind k, creates
// missing parent directories, removes an earlier non-directory entry of the
// same name and counts the entry. It reports whether rel is an existing
// directory that a new directory entry merely updates.
func (s *stager) prepare(rel string, k kind) (merge bool, err error) {
	if len(rel) > s.limits.MaxPathLen {
		return false, tooLargef("path %q is longer than %d bytes", textclip.Bytes(rel, maxEcho), s.limits.MaxPathLen)
	}
	if rel == "." && k != kindDir {
		return false, rejectf("the root of the tree must be a directory")
	}
	for i := 0; i < len(rel); i++ {
		if rel[i] != '/' {
			continue
		}
		parent := rel[:i]
		switch s.kinds[parent] {
		case kindDir:
		case 0:
			if err := s.count(); err != nil {
				return false, err
			}
			if err := s.root.Mkdir(parent, 0o700); err != nil {
				return false, fmt.Errorf("create directory %s: %w", parent, err)
			}
			s.kinds[parent] = kindDir
			s.dirs[parent] = meta{mode: 0o755}
		default:
			return false, rejectf("%s: parent %s is not a directory (writing through a symlink or file is not allowed)", rel, parent)
		}
	}
	if err := s.count(); err != nil {
		return false, err
	}
	old, exists := s.kinds[rel]
	switch {
	case !exists:
		return false, nil
	case old == kindDir && k == kindDir:
		return true, nil
	case old == kindDir:
		return false, rejectf("%s: a later entry would replace a directory with a non-directory", rel)
	}
	if err := s.root.Remove(rel); err != nil {
		return false, fmt.Errorf("replace %s: %w", rel, err)
	}
	delete(s.kinds, rel)
	return false, nil
}

func (s *stager) count() error {
	s.entries++
	if s.entries > s.limits.MaxEntries {
		return tooLargef("more than %d entries", s.limits.MaxEntries)
	}
	s.progress.report(s.entries, s.bytes, false)
	return nil
}

// dir creates directory rel (or updates the metadata of an existing one).
// Its metadata is applied by finish, after its contents are written.
func (s *stager) dir(rel string, m meta) error {
	if err := m.check(rel); err != nil {
		return err
	}
	if rel == "." {
		s.dirs["."] = m
		return nil
	}
	merge, err := s.prepare(rel, kindDir)
	if err != nil {
		return err
	}
	if !merge {
		if err := s.root.Mkdir(rel, 0o700); err != nil {
			return fmt.Errorf("create directory %s: %w", rel, err)
		}
		s.kinds[rel] = kindDir
	}
	s.dirs[rel] = m
	return nil
}

// file creates regular file rel with exactly size bytes read from r.
func (s *stager) file(ctx context.Context, rel string, m meta, size int64, r io.Reader) error {
	f, err := s.createFile(rel, m, size)
	if err != nil {
		return err
	}
	err = s.copyN(ctx, f, r, size, rel)
	if err == nil {
		err = applyMeta(f, m)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", rel, cerr)
	}
	if err != nil {
		return err
	}
	return s.setTimes(rel, m.mtime)
}

// createFile checks that regular file rel of size bytes may be created and
// creates it, empty and private, for writing.
func (s *stager) createFile(rel string, m meta, size int64) (*os.File, error) {
	if err := m.check(rel); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, rejectf("%s: negative size", rel)
	}
	if size > s.limits.MaxBytes-s.bytes {
		return nil, tooLargef("%s: %d bytes would exceed the limit of %d bytes in total", rel, size, s.limits.MaxBytes)
	}
	if _, err := s.prepare(rel, kindFile); err != nil {
		return nil, err
	}
	f, err := s.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", rel, err)
	}
	s.kinds[rel] = kindFile
	return f, nil
}

// copyN writes size bytes read from r into the empty file f. Aligned
// blocks of zeros are not written but left as holes, so that a sparse file
// that travelled in an archive is sparse again.
func (s *stager) copyN(ctx context.Context, f *os.File, r io.Reader, size int64, rel string) error {
	total, off := size, int64(0)
	for size > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int64(len(s.buf))
		if size < n {
			n = size
		}
		got, err := io.ReadFull(r, s.buf[:n])
		if got > 0 {
			if werr := writeSparse(f, s.buf[:got], off); werr != nil {
				return fmt.Errorf("write %s: %w", rel, werr)
			}
			off += int64(got)
			s.bytes += int64(got)
			size -= int64(got)
			s.progress.report(s.entries, s.bytes, false)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return rejectf("%s: content ends %d bytes early (truncated input)", rel, size)
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return &sourceReadError{rel: rel, err: err}
		}
	}
	if err := f.Truncate(total); err != nil { // a trailing hole
		return fmt.Errorf("write %s: %w", rel, err)
	}
	return nil
}

// sourceReadError is a failure to read an entry's content from the source
// (as opposed to writing it into the staging tree).
type sourceReadError struct {
	rel string
	err error
}

func (e *sourceReadError) Error() string { return fmt.Sprintf("read %s: %v", e.rel, e.err) }
func (e *sourceReadError) Unwrap() error { return e.err }

// symlink creates symlink rel pointing at target, which is kept as it is:
// it is resolved inside the sandbox, never here.
func (s *stager) symlink(rel, target string, m meta) error {
	if err := m.check(rel); err != nil {
		return err
	}
	if target == "" || strings.IndexByte(target, 0) >= 0 || len(target) >= unix.PathMax {
		return rejectf("%s: invalid symlink target %q", rel, textclip.Bytes(target, maxEcho))
	}
	if _, err := s.prepare(rel, kindSymlink); err != nil {
		return err
	}
	if err := s.root.Symlink(target, rel); err != nil {
		return fmt.Errorf("create symlink %s: %w", rel, err)
	}
	s.kinds[rel] = kindSymlink
	if err := s.root.Lchown(rel, m.uid, m.gid); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	return s.setTimes(rel, m.mtime)
}

// hardlink makes rel another name of the regular file target, which must be
// an earlier entry of the same tree.
func (s *stager) hardlink(rel, target string) error {
	if rel == target {
		return rejectf("%s: hardlink to itself", rel)
	}
	switch s.kinds[target] {
	case kindFile:
	case 0:
		return rejectf("%s: hardlink target %s is not an earlier entry of the archive", rel, target)
	default:
		return rejectf("%s: hardlink target %s is not a regular file", rel, target)
	}
	if _, err := s.prepare(rel, kindFile); err != nil {
		return err
	}
	if err := s.root.Link(target, rel); err != nil {
		return fmt.Errorf("hardlink %s to %s: %w", rel, target, err)
	}
	s.kinds[rel] = kindFile
	return nil
}

// finish applies the directories' ownership, permissions and times, deepest
// first.
func (s *stager) finish(ctx context.Context) error {
	rels := make([]string, 0, len(s.dirs))
	for rel := range s.dirs {
		rels = append(rels, rel)
	}
	// Reverse byte order puts every directory after all of its descendants.
	slices.Sort(rels)
	slices.Reverse(rels)
	for _, rel := range rels {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := s.dirs[rel]
		f, err := s.root.OpenFile(rel, os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("open directory %s: %w", rel, err)
		}
		err = applyMeta(f, m)
		f.Close()
		if err != nil {
			return err
		}
		if rel == "." {
			err = os.Chtimes(s.rootPath, clampTime(m.mtime), clampTime(m.mtime))
		} else {
			err = s.setTimes(rel, m.mtime)
		}
		if err != nil {
			return fmt.Errorf("set times of %s: %w", rel, err)
		}
	}
	s.progress.report(s.entries, s.bytes, true)
	return nil
}

// applyMeta sets owner then mode (chown clears setuid and setgid) on an open
// file or directory.
func applyMeta(f *os.File, m meta) error {
	if err := f.Chown(m.uid, m.gid); err != nil {
		return fmt.Errorf("chown %s: %w", f.Name(), err)
	}
	if err := f.Chmod(fileMode(m.mode)); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	return nil
}

// fileMode converts Unix permission bits to an os.FileMode.
func fileMode(mode uint32) os.FileMode {
	fm := os.FileMode(mode & 0o777)
	if mode&unix.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// setTimes sets the access and modification times of rel (not following a
// symlink) through its open parent directory.
func (s *stager) setTimes(rel string, t time.Time) error {
	dirFd, base, err := s.parent(rel)
	if err != nil {
		return err
	}
	ts := unix.NsecToTimespec(clampTime(t).UnixNano())
	if err := unix.UtimesNanoAt(dirFd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", rel, err)
	}
	return nil
}

// parent returns an open descriptor of rel's parent directory (cached
// while consecutive entries share it; the stager owns it) and rel's base
// name.
func (s *stager) parent(rel string) (int, string, error) {
	parent, base := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		parent = "."
	}
	if s.parentFile == nil || s.parentRel != parent {
		if s.parentFile != nil {
			s.parentFile.Close()
			s.parentFile = nil
		}
		f, err := s.root.OpenFile(parent, os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, "", fmt.Errorf("open directory %s: %w", parent, err)
		}
		s.parentFile, s.parentRel = f, parent
	}
	return int(s.parentFile.Fd()), base, nil
}

// clampTime keeps times within what UnixNano and common filesystems hold.
func clampTime(t time.Time) time.Time {
	lo, hi := time.Unix(0, 0), time.Unix(1<<32, 0)
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// progressReporter calls a Progress callback at most every interval, plus
// once at the end.
type progressReporter struct {
	fn       func(Progress)
	interval time.Duration
	last     time.Time
}

func newProgressReporter(fn func(Progress)) *progressReporter {
	return &progressReporter{fn: fn, interval: 200 * time.Millisecond}
}

func (p *progressReporter) report(entries int, bytes int64, force bool) {
	if p == nil || p.fn == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	p.fn(Progress{Entries: entries, Bytes: bytes})
}
