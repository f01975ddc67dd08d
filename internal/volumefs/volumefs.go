// Package volumefs reads and writes the files of a mounted volume for the
// volume content API. Every path is resolved by the kernel beneath the
// volume's root (openat2 with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV): ".." stops at the root, an absolute symlink is taken
// from the root, /proc-style magic links are refused and no other mount is
// crossed, however the tree changes while a request runs (a sandbox that
// mounts the volume may swap a directory for a symlink at any time). The
// last component is then acted on relative to its parent's descriptor,
// never through a path again.
//
// Writes are atomic: the content goes to a file in the staging directory
// (on the volume's filesystem, outside what sandboxes see), is synced and
// renamed into place, so a reader sees the old file or the new one, and a
// crash leaves at most a staged file, removed at the next mount
// (internal/volumedisk).
package volumefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// Errors besides the system's (fs.ErrNotExist, unix.ENOTDIR, unix.EISDIR,
// unix.ENOTEMPTY, unix.EEXIST, unix.ENOSPC, unix.ELOOP, unix.EXDEV), which
// the callers map.
var (
	// ErrTooLarge: a write's content is over its bound.
	ErrTooLarge = errors.New("the content is larger than the volume")
	// ErrUnsupportedType: not a regular file, directory or symlink, or a
	// file was needed and this is none.
	ErrUnsupportedType = errors.New("not a regular file")
	// ErrRoot: the volume's root cannot be removed, moved or replaced.
	ErrRoot = errors.New("the volume's root cannot be removed, moved or written")
)

// MaxListEntries bounds one listing.
const MaxListEntries = 10000

// maxOwnerID bounds uid and gid: a volume's files are owned by guest ids,
// which every sandbox maps from 0–65535.
const maxOwnerID = 65535

// resolveFlags keep every lookup beneath the root.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Type is what an entry is.
type Type string

// The types of entries.
const (
	TypeFile      Type = "file"
	TypeDirectory Type = "directory"
	TypeSymlink   Type = "symlink"
	TypeOther     Type = "other"
)

// Entry describes a file of a volume (not following a symlink).
type Entry struct {
	Path                model.VolumeFilePath
	Name                string // "" for the root
	Type                Type
	Size                int64
	Mode                uint32 // permission bits (0o7777)
	UID, GID            uint32
	ATime, MTime, CTime time.Time
	Target              string // a symlink's target
}

// Owner is what a new file or directory is made with, or what metadata
// sets; nil fields keep the default (0o644 files, 0o755 directories,
// owned by uid and gid 0) or the present value.
type Owner struct {
	Mode     *uint32
	UID, GID *uint32
}

func (o Owner) check() error {
	if o.Mode != nil && *o.Mode&^0o7777 != 0 {
		return fmt.Errorf("%w: mode %#o has bits besides 0o7777", model.ErrInvalid, *o.Mode)
	}
	for _, id := range []*uint32{o.UID, o.GID} {
		if id != nil && *id > maxOwnerID {
			return fmt.Errorf("%w: uid and gid must be at most %d (a volume's files are owned by guest ids)", model.ErrInvalid, maxOwnerID)
		}
	}
	return nil
}

// Root is a volume's open data directory and staging directory.
type Root struct {
	root, staging int
}

// Open opens the volume whose files are in dir, with staging (on the same
// filesystem) for writes in progress.
func Open(dir, staging string) (*Root, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", dir, err)
	}
	st, err := unix.Open(staging, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(root)
		return nil, fmt.Errorf("open volume staging %s: %w", staging, err)
	}
	return &Root{root: root, staging: st}, nil
}

// Close closes r.
func (r *Root) Close() error {
	return errors.Join(unix.Close(r.root), unix.Close(r.staging))
}

// resolve opens p beneath the root.
func (r *Root) resolve(p model.VolumeFilePath, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveFlags}
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat2(r.root, p.Rel(), &how)
		// EAGAIN: a rename raced the lookup of "..": the kernel asks to
		// try again.
		if (err == unix.EAGAIN || err == unix.EINTR) && attempt < 16 {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: p.String(), Err: err}
		}
		return fd, nil
	}
}

// parent opens p's parent directory (O_PATH) and returns p's last
// component; the root has none (ErrRoot).
func (r *Root) parent(p model.VolumeFilePath) (int, string, error) {
	if p.IsRoot() {
		return -1, "", ErrRoot
	}
	dir, name := p.Split()
	fd, err := r.resolve(dir, unix.O_PATH|unix.O_DIRECTORY)
	return fd, name, err
}

// Stat describes p; a symlink is described, not followed.
func (r *Root) Stat(p model.VolumeFilePath) (Entry, error) {
	fd, err := r.resolve(p, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(fd)
	_, name := p.Split()
	return entryAt(fd, "", p, name)
}

// entryAt describes name in directory dirfd ("" : dirfd itself), at p.
func entryAt(dirfd int, name string, p model.VolumeFilePath, base string) (Entry, error) {
	var st unix.Stat_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
		return Entry{}, &fs.PathError{Op: "stat", Path: p.String(), Err: err}
	}
	e := Entry{
		Path: p, Name: base, Size: st.Size, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		ATime: time.Unix(st.Atim.Unix()).UTC(), MTime: time.Unix(st.Mtim.Unix()).UTC(), CTime: time.Unix(st.Ctim.Unix()).UTC(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = TypeFile
	case unix.S_IFDIR:
		e.Type = TypeDirectory
	case unix.S_IFLNK:
		e.Type = TypeSymlink
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return Entry{}, &fs.PathError{Op: "readlink", Path: p.String(), Err: err}
		}
		e.Target = string(buf[:n])
	default:
		e.Type = TypeOther
	}
	return e, nil
}

// List lists directory p (following a symlink to it, beneath the root)
// and, for depth > 1, the directories below it to that depth (symlinks
// to directories are not entered). At most MaxListEntries entries; more
// is reported by truncated.
func (r *Root) List(p model.VolumeFilePath, depth int) (entries []Entry, truncated bool, err error) {
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, false, err
	}
	l := lister{}
	err = l.list(fd, p, max(depth, 1))
	return l.out, l.truncated, err
}

type lister struct {
	out       []Entry
	truncated bool
}

// list lists the directory open as fd (and closes it).
func (l *lister) list(fd int, p model.VolumeFilePath, depth int) error {
	dir := os.NewFile(uintptr(fd), p.String())
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	for _, name := range names {
		if len(l.out) == MaxListEntries {
			l.truncated = true
			return nil
		}
		e, err := entryAt(fd, name, p.Join(name), name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		} else if err != nil {
			return err
		}
		l.out = append(l.out, e)
		if e.Type != TypeDirectory || depth <= 1 {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
				continue // changed meanwhile
			}
			return &fs.PathError{Op: "open", Path: e.Path.String(), Err: err}
		}
		if err := l.list(sub, e.Path, depth-1); err != nil {
			return err
		}
	}
	return nil
}

// OpenFile opens regular file p for reading (following symlinks beneath
// the root).
func (r *Root) OpenFile(p model.VolumeFilePath) (*os.File, Entry, error) {
	// O_NONBLOCK: a FIFO must not block the open (it is refused below);
	// the volume is mounted nodev, so no device opens at all.
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, Entry{}, err
	}
	_, name := p.Split()
	e, err := entryAt(fd, "", p, name)
	if err == nil && e.Type != TypeFile {
		err = &fs.PathError{Op: "read", Path: p.String(), Err: ErrUnsupportedType}
		if e.Type == TypeDirectory {
			err = &fs.PathError{Op: "read", Path: p.String(), Err: unix.EISDIR}
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, Entry{}, err
	}
	return os.NewFile(uintptr(fd), p.String()), e, nil
}

// WriteOptions are a write's.
type WriteOptions struct {
	Owner
	// NoReplace refuses to replace an existing file (EEXIST).
	NoReplace bool
	// MaxBytes bounds the content (ErrTooLarge beyond it).
	MaxBytes int64
}

// WriteFile writes body to p atomically, making missing parent
// directories (0o755, owned by 0:0).
func (r *Root) WriteFile(p model.VolumeFilePath, body io.Reader, opts WriteOptions) (Entry, error) {
	if err := opts.check(); err != nil {
		return Entry{}, err
	}
	if p.IsRoot() {
		return Entry{}, ErrRoot
	}
	dir, name := p.Split()
	if _, err := r.Mkdir(dir, Owner{}, true); err != nil {
		return Entry{}, err
	}
	dirfd, err := r.resolve(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(dirfd)
	tmp, err := r.stage(body, opts)
	if err != nil {
		return Entry{}, fmt.Errorf("write %s: %w", p, err)
	}
	flags := uint(0)
	if opts.NoReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(r.staging, tmp, dirfd, name, flags); err != nil {
		_ = unix.Unlinkat(r.staging, tmp, 0)
		return Entry{}, &fs.PathError{Op: "write", Path: p.String(), Err: err}
	}
	return entryAt(dirfd, name, p, name)
}

// stage writes body to a new synced file of the staging directory and
// returns its name.
func (r *Root) stage(body io.Reader, opts WriteOptions) (string, error) {
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	name := "upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(r.staging, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	err = func() error {
		n, err := io.Copy(f, io.LimitReader(body, opts.MaxBytes+1))
		if err != nil {
			return err
		}
		if n > opts.MaxBytes {
			return fmt.Errorf("%w (%d bytes at most)", ErrTooLarge, opts.MaxBytes)
		}
		if err := applyOwner(fd, opts.Owner, 0o644); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(r.staging, name, 0)
		return "", err
	}
	return name, nil
}

// applyOwner sets mode (def if o has none) and owner of the file open as fd.
func applyOwner(fd int, o Owner, def uint32) error {
	mode := def
	if o.Mode != nil {
		mode = *o.Mode
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	if o.UID == nil && o.GID == nil {
		return nil
	}
	uid, gid := -1, -1
	if o.UID != nil {
		uid = int(*o.UID)
	}
	if o.GID != nil {
		gid = int(*o.GID)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	if o.Mode == nil && mode&0o6000 == 0 {
		return nil
	}
	return unix.Fchmod(fd, mode) // chown clears set-id bits
}

// Mkdir makes directory p with o; with parents, missing parents too
// (0o755, owned by 0:0) and an existing directory p is no error (mkdir
// -p), without, p's parent must exist and p must not.
func (r *Root) Mkdir(p model.VolumeFilePath, o Owner, parents bool) (Entry, error) {
	if err := o.check(); err != nil {
		return Entry{}, err
	}
	if p.IsRoot() {
		if !parents {
			return Entry{}, &fs.PathError{Op: "mkdir", Path: "/", Err: unix.EEXIST}
		}
		return r.Stat(p)
	}
	if parents {
		dir, _ := p.Split()
		if _, err := r.Mkdir(dir, Owner{}, true); err != nil {
			return Entry{}, err
		}
	}
	dirfd, name, err := r.parent(p)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(dirfd)
	err = unix.Mkdirat(dirfd, name, 0o700)
	switch {
	case err == unix.EEXIST && parents:
		// A directory, or a symlink to one beneath the root.
		fd, err := r.resolve(p, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return Entry{}, err
		}
		defer unix.Close(fd)
		return entryAt(fd, "", p, name)
	case err != nil:
		return Entry{}, &fs.PathError{Op: "mkdir", Path: p.String(), Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Entry{}, &fs.PathError{Op: "mkdir", Path: p.String(), Err: err}
	}
	err = applyOwner(fd, o, 0o755)
	unix.Close(fd)
	if err != nil {
		return Entry{}, &fs.PathError{Op: "mkdir", Path: p.String(), Err: err}
	}
	return entryAt(dirfd, name, p, name)
}

// SetMetadata changes p's mode and owner (a symlink is refused: ELOOP).
func (r *Root) SetMetadata(p model.VolumeFilePath, o Owner) (Entry, error) {
	if err := o.check(); err != nil {
		return Entry{}, err
	}
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(fd)
	_, name := p.Split()
	e, err := entryAt(fd, "", p, name)
	if err != nil {
		return Entry{}, err
	}
	if o.Mode == nil {
		o.Mode = &e.Mode
	}
	if err := applyOwner(fd, o, e.Mode); err != nil {
		return Entry{}, &fs.PathError{Op: "chmod", Path: p.String(), Err: err}
	}
	return entryAt(fd, "", p, name)
}

// Remove removes p (a symlink itself, not its target); a directory only
// when empty unless recursive.
func (r *Root) Remove(p model.VolumeFilePath, recursive bool) error {
	dirfd, name, err := r.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	err = unix.Unlinkat(dirfd, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == unix.ENOTEMPTY && recursive {
			err = removeAllAt(dirfd, name)
		}
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: p.String(), Err: err}
	}
	return nil
}

// removeAllAt removes directory name of dirfd and everything below it,
// never following a symlink.
func removeAllAt(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(fd), name)
	for {
		names, err := dir.Readdirnames(256)
		for _, n := range names {
			e := unix.Unlinkat(fd, n, 0)
			if e == unix.EISDIR {
				if e = unix.Unlinkat(fd, n, unix.AT_REMOVEDIR); e == unix.ENOTEMPTY || e == unix.EEXIST {
					e = removeAllAt(fd, n)
				}
			}
			if e != nil && e != unix.ENOENT {
				dir.Close()
				return e
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			dir.Close()
			return err
		}
		// Entries were removed: read the directory again from its start.
		if _, err := dir.Seek(0, io.SeekStart); err != nil {
			dir.Close()
			return err
		}
	}
	dir.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// Rename moves from to to; an existing to is replaced only with
// overwrite (a directory only by a directory, and only when empty).
func (r *Root) Rename(from, to model.VolumeFilePath, overwrite bool) (Entry, error) {
	fromfd, fromName, err := r.parent(from)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(fromfd)
	tofd, toName, err := r.parent(to)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(tofd)
	flags := uint(unix.RENAME_NOREPLACE)
	if overwrite {
		flags = 0
	}
	if err := unix.Renameat2(fromfd, fromName, tofd, toName, flags); err != nil {
		return Entry{}, &fs.PathError{Op: "rename", Path: from.String() + " → " + to.String(), Err: err}
	}
	return entryAt(tofd, toName, to, toName)
}

// SweepStaging removes what writes left in the staging directory dir (a
// crash): call it only while no write runs (before the volume is opened).
func SweepStaging(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := os.Remove(dir + "/" + e.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
