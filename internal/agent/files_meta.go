package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// File metadata (agentproto.SetMetadataRequest) is kept as the file's
// extended attributes "user.e2b.<key>", read with flistxattr/fgetxattr on
// a descriptor opened without following a final symlink (the kernel allows
// user.* attributes on regular files and directories only).

// maxXattrList bounds the attribute name list read of one file.
const maxXattrList = 64 << 10

// readMetadataAt returns the metadata of name in dirfd, of type typ (a
// regular file or a directory; nil for anything else, for a file the
// caller may not open, and on a file system without extended attributes).
func readMetadataAt(dirfd int, name, typ string) map[string]string {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	switch typ {
	case agentproto.FileTypeFile:
	case agentproto.FileTypeDirectory:
		flags |= unix.O_DIRECTORY
	default:
		return nil
	}
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || typeOf(st.Mode) != typ {
		return nil // replaced meanwhile
	}
	return readMetadataFd(fd)
}

// readMetadataFd reads the metadata attributes of an open file.
func readMetadataFd(fd int) map[string]string {
	names, err := listXattrs(fd)
	if err != nil {
		return nil
	}
	var out map[string]string
	buf := make([]byte, model.MaxFileMetadataValue)
	for _, n := range names {
		key, ok := strings.CutPrefix(n, agentproto.FileMetadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		if len(out) >= model.MaxFileMetadataEntries {
			break
		}
		sz, err := unix.Fgetxattr(fd, n, buf)
		if err != nil {
			continue // ERANGE (set out of band beyond the bound) or gone
		}
		if out == nil {
			out = make(map[string]string)
		}
		out[key] = string(buf[:sz])
	}
	return out
}

// listXattrs lists the attribute names of fd (bounded by maxXattrList).
func listXattrs(fd int) ([]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		return nil, err
	}
	if size > maxXattrList {
		size = maxXattrList
	}
	buf := make([]byte, size)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names, nil
}

// setMetadata replaces p's metadata with m (already parsed) and describes p.
func (r fsRoot) setMetadata(p model.GuestPath, m model.FileMetadata) (agentproto.FileInfo, error) {
	dirfd, base, err := r.parent(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(dirfd)
	fi, err := statAt(dirfd, base, string(p))
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	switch fi.Type {
	case agentproto.FileTypeFile:
	case agentproto.FileTypeDirectory:
		flags |= unix.O_DIRECTORY
	default:
		return agentproto.FileInfo{}, fileErrorf(http.StatusBadRequest, agentproto.CodeUnsupportedFileType, "%s: metadata is kept on regular files and directories only", p)
	}
	fd, err := unix.Openat(dirfd, base, flags, 0)
	if err != nil {
		return agentproto.FileInfo{}, errnoError("open", string(p), err)
	}
	defer unix.Close(fd)
	names, err := listXattrs(fd)
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		return agentproto.FileInfo{}, errnoError("list the attributes of", string(p), err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, agentproto.FileMetadataXattrPrefix) {
			if err := unix.Fremovexattr(fd, n); err != nil && !errors.Is(err, unix.ENODATA) {
				return agentproto.FileInfo{}, xattrError(p, err)
			}
		}
	}
	for k, v := range m {
		if err := unix.Fsetxattr(fd, agentproto.FileMetadataXattrPrefix+k, []byte(v), 0); err != nil {
			return agentproto.FileInfo{}, xattrError(p, err)
		}
	}
	return statAt(dirfd, base, string(p))
}

// xattrError maps a failure to set or remove an attribute.
func xattrError(p model.GuestPath, err error) error {
	switch {
	case errors.Is(err, unix.ENOTSUP):
		return fileErrorf(http.StatusBadRequest, agentproto.CodeUnsupportedFileType, "%s: its file system keeps no extended attributes, so no metadata", p)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.E2BIG), errors.Is(err, unix.ERANGE):
		return fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidRequest, "%s: its file system has no room for this metadata", p)
	}
	return errnoError("set the metadata of", string(p), err)
}

// mkdirAllOwned creates p and its missing parents so that each directory
// it creates belongs to owner, as E2B's envd (root, with CAP_CHOWN) makes
// them. The agent has no CAP_CHOWN: a directory owner may create itself is
// made as owner; one only root may create (its parent is root's) is made
// as owner in a staging directory beside it, which root creates for the
// purpose, then renamed into place by root. Every lookup resolves in the
// root (RESOLVE_IN_ROOT), every change is an *at call on a descriptor of
// the parent, so neither ".." nor a symlink leads out.
func (r fsRoot) mkdirAllOwned(log *slog.Logger, p model.GuestPath, mode uint32, owner agentproto.FileUser) (agentproto.FileInfo, error) {
	if mode == 0 {
		mode = 0o755
	}
	if mode&^0o777 != 0 {
		return agentproto.FileInfo{}, fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidRequest, "mode %o: only permission bits with an owner", mode)
	}
	root, err := r.openRoot()
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(root)
	relPath := rel(p)
	if relPath != "." {
		parts := strings.Split(relPath, "/")
		for i := range parts {
			prefix := strings.Join(parts[:i+1], "/")
			if fd, err := openat2(root, prefix, unix.O_PATH|unix.O_DIRECTORY, inRoot); err == nil {
				unix.Close(fd)
				continue
			} else if !errors.Is(err, unix.ENOENT) {
				return agentproto.FileInfo{}, errnoError("mkdir", string(p), err)
			}
			parentRel := "."
			if i > 0 {
				parentRel = strings.Join(parts[:i], "/")
			}
			pfd, err := openat2(root, parentRel, unix.O_PATH|unix.O_DIRECTORY, inRoot)
			if err != nil {
				return agentproto.FileInfo{}, errnoError("mkdir", string(p), err)
			}
			err = mkdirOwnedAt(log, pfd, parts[i], mode, owner)
			unix.Close(pfd)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return agentproto.FileInfo{}, errnoError("mkdir", string(p), err)
			}
			fd, err := openat2(root, prefix, unix.O_PATH|unix.O_DIRECTORY, inRoot)
			if err != nil {
				return agentproto.FileInfo{}, errnoError("mkdir", string(p), err)
			}
			unix.Close(fd)
		}
	}
	return r.stat(p)
}

// asOwner runs fn as owner on a thread of its own (runAs) and returns fn's
// error, or runAs's.
func asOwner(log *slog.Logger, owner agentproto.FileUser, fn func() error) error {
	var err error
	if runErr := runAs(log, owner, func() { err = fn() }); runErr != nil {
		return runErr
	}
	return err
}

// stagingPrefix names the agent's staging directories; one left by a crash
// between its creation and its removal is empty and harmless.
const stagingPrefix = ".airlock-mkdir-"

// mkdirOwnedAt creates name in pfd, owned by owner with mode.
func mkdirOwnedAt(log *slog.Logger, pfd int, name string, mode uint32, owner agentproto.FileUser) error {
	err := asOwner(log, owner, func() error {
		if err := unix.Mkdirat(pfd, name, mode); err != nil {
			return err
		}
		return fchmodDirAt(pfd, name, mode) // past the umask
	})
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
		return err
	}
	// Only root may create in pfd: stage it.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	stage := stagingPrefix + hex.EncodeToString(rnd[:])
	if err := unix.Mkdirat(pfd, stage, 0o700); err != nil {
		return err // root may not either: EACCES as the owner got
	}
	defer func() {
		if err := unix.Unlinkat(pfd, stage, unix.AT_REMOVEDIR); err != nil {
			log.Warn("mkdir: cannot remove a staging directory", "name", stage, "err", err)
		}
	}()
	// owner needs search and write in the staging directory, and root write
	// in the new directory (a directory moved to another parent updates its
	// ".."; root has no CAP_DAC_OVERRIDE): 0777 until it is in place. Modes
	// change through descriptors opened with O_NOFOLLOW, never by name.
	sfd, err := unix.Openat(pfd, stage, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	if err := unix.Fchmod(sfd, 0o733); err != nil {
		return err
	}
	if err := asOwner(log, owner, func() error {
		if err := unix.Mkdirat(sfd, name, 0o700); err != nil {
			return err
		}
		return fchmodDirAt(sfd, name, 0o777)
	}); err != nil {
		return err
	}
	if err := unix.Renameat2(sfd, name, pfd, name, unix.RENAME_NOREPLACE); err != nil {
		_ = asOwner(log, owner, func() error { return unix.Unlinkat(sfd, name, unix.AT_REMOVEDIR) })
		return err
	}
	return asOwner(log, owner, func() error { return fchmodDirAt(pfd, name, mode) })
}

// fchmodDirAt sets the mode of directory name in dirfd, never following a
// symlink there.
func fchmodDirAt(dirfd int, name string, mode uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode)
}
