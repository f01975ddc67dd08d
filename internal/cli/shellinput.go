package cli

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// interruptibleInput returns a reader of r whose blocked Read stop ends,
// so that the goroutine forwarding our stdin ends with the shell even while
// nobody types. For a file (a terminal, a pipe) it reads a non-blocking
// duplicate of the descriptor through the runtime's poller; stop closes it
// and restores the descriptor's blocking mode (shared with the duplicate).
// Other readers cannot be interrupted: ok is false, and their forwarding
// ends at their end of input or at the first write after the shell ended.
func interruptibleInput(r io.Reader) (in io.Reader, stop func(), ok bool) {
	f, isFile := r.(*os.File)
	if !isFile {
		return r, func() {}, false
	}
	fd := int(f.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return r, func() {}, false
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return r, func() {}, false
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup)
		return r, func() {}, false
	}
	nb := os.NewFile(uintptr(dup), f.Name())
	return nb, func() {
		_ = nb.Close() // wakes a blocked Read
		_ = unix.SetNonblock(fd, flags&unix.O_NONBLOCK != 0)
	}, true
}
