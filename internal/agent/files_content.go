package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
)

// openRegular opens p for reading and checks that it is a regular file. It
// looks at the file through an O_PATH descriptor first, so opening never
// touches a device or blocks on a FIFO, then opens it for reading and checks
// that it is still the same inode.
func (r fsRoot) openRegular(p model.GuestPath) (*os.File, int64, error) {
	pfd, err := r.open(p, unix.O_PATH)
	if err != nil {
		return nil, 0, err
	}
	var st unix.Stat_t
	err = unix.Fstat(pfd, &st)
	unix.Close(pfd)
	if err != nil {
		return nil, 0, errnoError("stat", string(p), err)
	}
	if err := wantRegular(st.Mode, string(p)); err != nil {
		return nil, 0, err
	}
	fd, err := r.open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, 0, err
	}
	var again unix.Stat_t
	if err := unix.Fstat(fd, &again); err != nil {
		unix.Close(fd)
		return nil, 0, errnoError("stat", string(p), err)
	}
	if again.Dev != st.Dev || again.Ino != st.Ino {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s changed while it was opened; retry", p)
	}
	return os.NewFile(uintptr(fd), string(p)), again.Size, nil
}

func wantRegular(mode uint32, p string) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return fileErrorf(http.StatusConflict, agentproto.CodeIsADirectory, "%s is a directory", p)
	}
	return unsupported(p)
}

// writeFile streams body into p: a temporary file in p's directory, renamed
// over p once complete, so readers never see a partial file. mode < 0 keeps
// the mode of an existing regular file (0644 for a new one).
func (r fsRoot) writeFile(p model.GuestPath, mode int, body io.Reader) (agentproto.FileInfo, error) {
	if p == "/" {
		return agentproto.FileInfo{}, fileErrorf(http.StatusConflict, agentproto.CodeIsADirectory, "/ is a directory")
	}
	dirfd, base, err := r.parent(p)
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	defer unix.Close(dirfd)
	if _, err := writeFileAt(dirfd, base, string(p), mode, body); err != nil {
		return agentproto.FileInfo{}, err
	}
	return statAt(dirfd, base, string(p))
}

// writeFileAt writes body to name in dirfd through a temporary file and a
// rename, and returns how many bytes it wrote. An existing symlink at name
// is refused, never followed or replaced.
func writeFileAt(dirfd int, name, shown string, mode int, body io.Reader) (int64, error) {
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if mode < 0 {
				mode = int(st.Mode & 0o7777)
			}
		case unix.S_IFLNK:
			return 0, fileErrorf(http.StatusBadRequest, agentproto.CodeUnsupportedFileType, "%s is a symlink: remove it first (writes never follow or replace a symlink)", shown)
		case unix.S_IFDIR:
			return 0, fileErrorf(http.StatusConflict, agentproto.CodeIsADirectory, "%s is a directory", shown)
		default:
			return 0, unsupported(shown)
		}
	case errors.Is(err, unix.ENOENT):
	default:
		return 0, errnoError("stat", shown, err)
	}
	if mode < 0 {
		mode = 0o644
	}
	tmp := tempName()
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, errnoError("create", path.Join(path.Dir(shown), tmp), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	n, err := io.CopyBuffer(onlyWriter{f}, body, make([]byte, copyBuffer))
	if err != nil {
		return n, fmt.Errorf("write %s: %w", shown, err)
	}
	if err := unix.Fchmod(fd, uint32(mode)); err != nil {
		return n, errnoError("chmod", shown, err)
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("close %s: %w", shown, err)
	}
	done = true
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return n, errnoError("rename", shown, err)
	}
	return n, nil
}

// onlyWriter hides ReadFrom, so io.CopyBuffer uses the bounded buffer.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(b []byte) (int, error) { return o.w.Write(b) }

func tempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return ".airlock-upload-" + hex.EncodeToString(b[:])
}
