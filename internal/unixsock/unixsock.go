// Package unixsock connects to Unix sockets by directory and name, the way
// the runtimes reach the sockets in a sandbox's directories (the guest
// agent's, QEMU's QMP and agent ports).
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotSocket: the name holds something other than a socket (a symlink a
// guest planted, a regular file). Trying again does not help.
var ErrNotSocket = errors.New("not a socket")

// DialIn connects to the Unix socket name inside dir. The directory may
// be writable by a guest, so neither dir nor name is followed if it is a
// symbolic link (O_PATH|O_NOFOLLOW) and name must be a socket; the connect
// then goes through /proc/self/fd/N of that very inode. Resolving the name
// itself would let a guest plant a symlink and point the host at any Unix
// socket on the host. Going through a descriptor also sidesteps the
// 108-byte limit of socket paths, so a directory of any length works.
func DialIn(ctx context.Context, dir, name string) (net.Conn, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir + "/" + name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: dir + "/" + name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s/%s (mode %#o): %w", dir, name, st.Mode, ErrNotSocket)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
