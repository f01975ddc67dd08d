package agent

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/textclip"
)

// parseSignal maps a signal name of the protocol ("TERM", "KILL", …; a
// "SIG" prefix is accepted) to the signal.
func parseSignal(name string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal number %d out of range 1–64", n)
		}
		return syscall.Signal(n), nil
	}
	switch strings.TrimPrefix(name, "SIG") {
	case "TERM":
		return syscall.SIGTERM, nil
	case "KILL":
		return syscall.SIGKILL, nil
	case "INT":
		return syscall.SIGINT, nil
	case "HUP":
		return syscall.SIGHUP, nil
	case "QUIT":
		return syscall.SIGQUIT, nil
	case "USR1":
		return syscall.SIGUSR1, nil
	case "USR2":
		return syscall.SIGUSR2, nil
	case "STOP":
		return syscall.SIGSTOP, nil
	case "CONT":
		return syscall.SIGCONT, nil
	case "WINCH":
		return syscall.SIGWINCH, nil
	}
	return 0, fmt.Errorf("unknown signal %q (want TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT, WINCH or a number)", textclip.Bytes(name, 32))
}

// signalName returns the protocol name of sig: "KILL" for SIGKILL, or
// "SIG42" style for signals without a name.
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return fmt.Sprintf("SIG%d", int(sig))
}
