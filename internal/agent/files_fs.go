package agent

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// fsRoot confines file operations to one directory (the sandbox's "/"):
// every path is resolved with openat2 relative to a descriptor of that
// directory, so ".." and symlinks (absolute or relative) cannot leave it and
// magic links (/proc/self/root, /proc/N/fd/…) are refused. Operations on
// the final component use the *at system calls on the parent's descriptor
// without following a symlink there.
type fsRoot struct {
	dir string
}

// inRoot resolves paths as if dir were "/".
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// beneath resolves paths below a directory and refuses any that leave it
// (tar extraction: an entry may not escape its target through a symlink).
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// copyBuffer is the buffer size of file streams: memory stays flat however
// large the file.
const copyBuffer = 256 << 10

// fileError is a refusal with its HTTP status and agentproto code.
type fileError struct {
	status int
	code   string
	msg    string
}

func (e *fileError) Error() string { return e.code + ": " + e.msg }

func fileErrorf(status int, code, format string, args ...any) *fileError {
	return &fileError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// errnoError maps a system call error on path p to a fileError; errors it
// does not know stay internal.
func errnoError(op, p string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s %s: %w", op, p, err)
	}
	switch errno {
	case unix.ENOENT:
		return fileErrorf(http.StatusNotFound, agentproto.CodeNotFound, "%s %s: no such file or directory", op, p)
	case unix.ENOTDIR:
		return fileErrorf(http.StatusConflict, agentproto.CodeNotADirectory, "%s %s: not a directory", op, p)
	case unix.EISDIR:
		return fileErrorf(http.StatusConflict, agentproto.CodeIsADirectory, "%s %s: is a directory", op, p)
	case unix.EEXIST:
		return fileErrorf(http.StatusConflict, agentproto.CodeAlreadyExists, "%s %s: already exists", op, p)
	case unix.ENOTEMPTY:
		return fileErrorf(http.StatusConflict, agentproto.CodeDirectoryNotEmpty, "%s %s: directory not empty", op, p)
	case unix.ELOOP:
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "%s %s: too many symlinks, or a magic link", op, p)
	case unix.EXDEV:
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "%s %s: the path leaves its directory", op, p)
	case unix.ENAMETOOLONG:
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "%s %s: name too long", op, p)
	case unix.EINVAL:
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "%s %s: invalid argument (e.g. a directory moved into itself)", op, p)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return fileErrorf(http.StatusForbidden, agentproto.CodePermissionDenied, "%s %s: %v", op, p, errno)
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

func unsupported(p string) *fileError {
	return fileErrorf(http.StatusBadRequest, agentproto.CodeUnsupportedFileType, "%s is not a regular file or directory", p)
}

// parsePath parses a guest path given by the host.
func parsePath(s string) (model.GuestPath, error) {
	p, err := model.ParseGuestPath(s)
	if err != nil {
		return "", fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "%v", err)
	}
	return p, nil
}

// rel is p relative to the root ("." for the root itself).
func rel(p model.GuestPath) string {
	if p == "/" {
		return "."
	}
	return string(p)[1:]
}

// openRoot opens the root directory (O_PATH). The caller closes it.
func (r fsRoot) openRoot() (int, error) {
	fd, err := unix.Open(r.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open files root %s: %w", r.dir, err)
	}
	return fd, nil
}

// openat2 retries the transient EAGAIN/EINTR that RESOLVE_IN_ROOT reports
// when a rename races with the lookup.
func openat2(dirfd int, name string, flags uint64, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	if flags&unix.O_CREAT != 0 {
		how.Mode = 0o600
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && i < 16 {
			continue
		}
		return fd, err
	}
}

// open opens p inside the root with flags.
func (r fsRoot) open(p model.GuestPath, flags uint64) (int, error) {
	root, err := r.openRoot()
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := openat2(root, rel(p), flags, inRoot)
	if err != nil {
		return -1, errnoError("open", string(p), err)
	}
	return fd, nil
}

// parent opens the directory that holds p (O_PATH) and returns it with p's
// final component. The root itself has no parent: it is returned as
// (root, "."), and callers that change the name refuse "/" first.
func (r fsRoot) parent(p model.GuestPath) (int, string, error) {
	if p == "/" {
		fd, err := r.openRoot()
		return fd, ".", err
	}
	dir, base := path.Split(string(p))
	fd, err := r.open(model.GuestPath(path.Clean(dir)), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	return fd, base, nil
}

// statAt describes name in dirfd without following a final symlink.
func statAt(dirfd int, name, p string) (agentproto.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return agentproto.FileInfo{}, errnoError("stat", p, err)
	}
	fi := infoOf(&st, p)
	if fi.Type == agentproto.FileTypeSymlink {
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(dirfd, name, buf); err == nil {
			fi.LinkTarget = string(buf[:n])
		}
	}
	fi.Metadata = readMetadataAt(dirfd, name, fi.Type)
	return fi, nil
}

func infoOf(st *unix.Stat_t, p string) agentproto.FileInfo {
	name := path.Base(p)
	if p == "/" {
		name = "/"
	}
	return agentproto.FileInfo{
		Path:    p,
		Name:    name,
		Type:    typeOf(st.Mode),
		Size:    st.Size,
		Mode:    st.Mode & 0o7777,
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		UID:     st.Uid,
		GID:     st.Gid,
	}
}

func typeOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return agentproto.FileTypeFile
	case unix.S_IFDIR:
		return agentproto.FileTypeDirectory
	case unix.S_IFLNK:
		return agentproto.FileTypeSymlink
	}
	return agentproto.FileTypeOther
}

// stat describes p (lstat semantics).
func (r fsRoot) stat(p model.GuestPath) (agentproto.FileInfo, error) {
	dirfd, base, err := r.parent(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(dirfd)
	return statAt(dirfd, base, string(p))
}

// list describes the entries of directory p, sorted by name; of a larger
// directory, the first (in directory order)
// agentproto.MaxListEntries of them.
func (r fsRoot) list(p model.GuestPath) (agentproto.FileList, error) {
	fd, err := r.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return agentproto.FileList{}, err
	}
	f := os.NewFile(uintptr(fd), string(p))
	defer f.Close()
	names, truncated, err := readNames(f, agentproto.MaxListEntries)
	if err != nil {
		return agentproto.FileList{}, fmt.Errorf("list %s: %w", p, err)
	}
	out := agentproto.FileList{Path: string(p), Entries: make([]agentproto.FileInfo, 0, len(names)), Truncated: truncated}
	for _, name := range names {
		fi, err := statAt(fd, name, path.Join(string(p), name))
		if err != nil {
			continue // removed meanwhile
		}
		out.Entries = append(out.Entries, fi)
	}
	return out, nil
}

// readNames reads up to limit names of directory f (all if limit <= 0),
// sorted.
func readNames(f *os.File, limit int) ([]string, bool, error) {
	var names []string
	for {
		batch, err := f.Readdirnames(1024)
		names = append(names, batch...)
		if limit > 0 && len(names) > limit {
			slices.Sort(names)
			return names[:limit], true, nil
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	slices.Sort(names)
	return names, false, nil
}

// mkdirAll creates p and its missing parents (mkdir -p).
func (r fsRoot) mkdirAll(p model.GuestPath, mode uint32) (agentproto.FileInfo, error) {
	if mode == 0 {
		mode = 0o755
	}
	if mode&^0o7777 != 0 {
		return agentproto.FileInfo{}, fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidRequest, "mode %o has bits beyond 07777", mode)
	}
	root, err := r.openRoot()
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(root)
	if err := mkdirAllAt(root, rel(p), mode, inRoot, string(p)); err != nil {
		return agentproto.FileInfo{}, err
	}
	return r.stat(p)
}

// mkdirAllAt creates the directory relPath below dirfd with its parents,
// resolving with the given RESOLVE_ flags; shown is the path for errors.
func mkdirAllAt(dirfd int, relPath string, mode uint32, resolve uint64, shown string) error {
	if relPath == "." {
		return nil
	}
	parts := strings.Split(relPath, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		if fd, err := openat2(dirfd, prefix, unix.O_PATH|unix.O_DIRECTORY, resolve); err == nil {
			unix.Close(fd)
			continue
		} else if !errors.Is(err, unix.ENOENT) {
			return errnoError("mkdir", shown, err)
		}
		parentRel := "."
		if i > 0 {
			parentRel = strings.Join(parts[:i], "/")
		}
		pfd, err := openat2(dirfd, parentRel, unix.O_PATH|unix.O_DIRECTORY, resolve)
		if err != nil {
			return errnoError("mkdir", shown, err)
		}
		err = unix.Mkdirat(pfd, parts[i], mode)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return errnoError("mkdir", shown, err)
		}
		// Check what is there now (ours, or a concurrent creator's).
		fd, err := openat2(dirfd, prefix, unix.O_PATH|unix.O_DIRECTORY, resolve)
		if err != nil {
			return errnoError("mkdir", shown, err)
		}
		unix.Close(fd)
	}
	return nil
}

// move renames from to to, never following a final symlink of either.
func (r fsRoot) move(from, to model.GuestPath, overwrite bool) error {
	if from == "/" || to == "/" {
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "the root directory cannot be moved or replaced")
	}
	fromDir, fromBase, err := r.parent(from)
	if err != nil {
		return err
	}
	defer unix.Close(fromDir)
	toDir, toBase, err := r.parent(to)
	if err != nil {
		return err
	}
	defer unix.Close(toDir)
	fi, err := statAt(fromDir, fromBase, string(from))
	if err != nil {
		return err
	}
	if fi.Type == agentproto.FileTypeOther {
		return unsupported(string(from))
	}
	var flags uint
	if !overwrite {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(fromDir, fromBase, toDir, toBase, flags); err != nil {
		return errnoError("move", string(from)+" to "+string(to), err)
	}
	return nil
}

// remove removes p; a directory only if empty, unless recursive. A final
// symlink is removed itself, never followed.
func (r fsRoot) remove(p model.GuestPath, recursive bool) error {
	if p == "/" {
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "the root directory cannot be removed")
	}
	dirfd, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	fi, err := statAt(dirfd, base, string(p))
	if err != nil {
		return err
	}
	if fi.Type != agentproto.FileTypeDirectory {
		if err := unix.Unlinkat(dirfd, base, 0); err != nil {
			return errnoError("remove", string(p), err)
		}
		return nil
	}
	if recursive {
		if err := removeAllAt(dirfd, base, 0); err != nil {
			return errnoError("remove", string(p), err)
		}
		return nil
	}
	if err := unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR); err != nil {
		return errnoError("remove", string(p), err)
	}
	return nil
}

// maxRemoveDepth bounds the recursion of removeAllAt (a path of 4096 bytes
// has at most 2048 components).
const maxRemoveDepth = 2048

// removeAllAt removes name in dirfd and, if it is a directory, everything
// in it. It opens each directory with O_NOFOLLOW, so it never leaves the
// tree through a symlink.
func removeAllAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if depth > maxRemoveDepth {
		return unix.ENAMETOOLONG
	}
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		for {
			names, rerr := f.Readdirnames(256)
			for _, n := range names {
				if err := removeAllAt(fd, n, depth+1); err != nil {
					f.Close()
					return err
				}
			}
			if rerr != nil || len(names) == 0 {
				break
			}
		}
		f.Close()
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) || attempt >= 3 {
			return err
		}
		// Something was created meanwhile: list again.
	}
}
