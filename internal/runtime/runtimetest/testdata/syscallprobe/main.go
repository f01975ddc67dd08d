// Command syscallprobe is a test-only helper of the runtime conformance
// suite, built static and copied into the sandbox template: it makes system
// calls that a sandbox's seccomp filter must refuse and prints one line per
// call, "name: ok" or "name: ERRNO".
package main

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	var uring [120]byte // struct io_uring_params
	var perf unix.PerfEventAttr
	perf.Type = unix.PERF_TYPE_SOFTWARE
	perf.Size = uint32(unsafe.Sizeof(perf))
	perf.Config = unix.PERF_COUNT_SW_CPU_CLOCK
	session, process := unix.KEY_SPEC_SESSION_KEYRING, unix.KEY_SPEC_PROCESS_KEYRING // negative: sign-extended
	keyType, desc, payload := []byte("user\x00"), []byte("airlock-probe\x00"), []byte("x")
	calls := []struct {
		name string
		call func() (uintptr, syscall.Errno)
	}{
		{"io_uring_setup", func() (uintptr, syscall.Errno) {
			return raw(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&uring[0])), 0)
		}},
		{"keyctl", func() (uintptr, syscall.Errno) {
			return raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(session), 0)
		}},
		{"add_key", func() (uintptr, syscall.Errno) {
			r, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&keyType[0])), uintptr(unsafe.Pointer(&desc[0])),
				uintptr(unsafe.Pointer(&payload[0])), 1, uintptr(process), 0)
			return r, e
		}},
		{"perf_event_open", func() (uintptr, syscall.Errno) {
			r, _, e := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&perf)), 0, ^uintptr(0), ^uintptr(0), 0, 0)
			return r, e
		}},
		{"bpf", func() (uintptr, syscall.Errno) { return raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0) }},
		{"userfaultfd", func() (uintptr, syscall.Errno) { return raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0) }},
		{"unshare(CLONE_NEWUSER)", func() (uintptr, syscall.Errno) { return raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0) }},
		{"clone(CLONE_NEWUSER)", func() (uintptr, syscall.Errno) {
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
			err := cmd.Run()
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return 0, errno
			}
			if err != nil {
				return 0, syscall.EIO
			}
			return 0, 0
		}},
	}
	for _, c := range calls {
		r, errno := c.call()
		if errno == 0 {
			fmt.Printf("%s: ok\n", c.name)
			if c.name != "keyctl" && c.name != "add_key" && c.name != "clone(CLONE_NEWUSER)" && c.name != "unshare(CLONE_NEWUSER)" {
				unix.Close(int(r))
			}
			continue
		}
		fmt.Printf("%s: %s\n", c.name, unix.ErrnoName(errno))
	}
}

func raw(trap, a1, a2, a3 uintptr) (uintptr, syscall.Errno) {
	r, _, e := unix.Syscall(trap, a1, a2, a3)
	return r, e
}
