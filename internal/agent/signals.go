package agent

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// parseSignal maps a signal name of the protocol ("TERM", "KILL", …; a
// "SIG" prefix is accepted) to the signal.
func parseSignal(name string) (syscall.Signal, error) {
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
	}
	if len(name) > 32 {
		name = name[:32] + "…"
	}
	return 0, fmt.Errorf("unknown signal %q (want TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT)", name)
}

// signalName returns the protocol name of sig: "KILL" for SIGKILL, or
// "SIG42" style for signals without a name.
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return fmt.Sprintf("SIG%d", int(sig))
}
