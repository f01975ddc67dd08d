package userns

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main is the helper of Create; a binary calls it (first thing in main)
// when its argv[0] is HelperName. It does not return.
//
//	airlock-userns create HOST SIZE [LIMIT=VALUE…]
//
// runs as the future owner (Create's credentials): it lowers its own
// RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE to the ceilings asked for (the
// kernel copies the creator's into the namespace) and starts itself again,
// as "limit", in a new user namespace whose id maps it writes (its ambient
// CAP_SETUID and CAP_SETGID allow that); once that child is ready it
// prints "ready PID" (the child's) and waits for it.
//
//	airlock-userns limit [LIMIT=VALUE…]
//
// runs as root in the new namespace: it writes the namespace's sysctl
// limits, prints "ready", and waits until its standard input closes.
func Main() {
	if err := helperMain(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, HelperName+":", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helperMain(args []string, stdin *os.File, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: create HOST SIZE [LIMIT=VALUE…] | limit [LIMIT=VALUE…]")
	}
	switch args[0] {
	case "create":
		if len(args) < 3 {
			return errors.New("usage: create HOST SIZE [LIMIT=VALUE…]")
		}
		host, err1 := strconv.ParseUint(args[1], 10, 32)
		size, err2 := strconv.ParseUint(args[2], 10, 32)
		m := Mapping{Host: uint32(host), Size: uint32(size)}
		if err1 != nil || err2 != nil || !m.valid() {
			return fmt.Errorf("invalid mapping 0:%s:%s", args[1], args[2])
		}
		lim, err := parseLimits(args[3:])
		if err != nil {
			return err
		}
		return create(m, lim, args[3:], stdin, stdout)
	case "limit":
		lim, err := parseLimits(args[1:])
		if err != nil {
			return err
		}
		for name, v := range lim.Sysctls {
			if err := os.WriteFile(name.Path(), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
				return fmt.Errorf("set the namespace's %s: %w", name, err)
			}
		}
		if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, stdin)
		return err
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// create is the "create" command, limitArgs the limits as given.
func create(m Mapping, lim Limits, limitArgs []string, stdin *os.File, stdout io.Writer) error {
	for name, v := range lim.Rlimits {
		var rl unix.Rlimit
		res := rlimitResources[name]
		if err := unix.Getrlimit(res, &rl); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if v > rl.Max {
			return fmt.Errorf("%s: %d is above this process's hard limit %d", name, v, rl.Max)
		}
		rl.Cur = v
		if err := unix.Setrlimit(res, &rl); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.Host), Size: int(m.Size)}}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	child := exec.Command("/proc/self/exe", append([]string{"limit"}, limitArgs...)...)
	child.Args[0] = HelperName
	child.Dir = "/"
	child.Env = []string{}
	child.Stdin, child.Stdout, child.Stderr = stdin, w, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER,
		UidMappings:                ids,
		GidMappings:                ids,
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	runtime.LockOSThread() // for Pdeathsig: see Create
	err = child.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("start a process in a new user namespace: %w", err)
	}
	line, rerr := bufio.NewReader(r).ReadString('\n')
	if rerr != nil || line != "ready\n" {
		_ = child.Process.Kill()
		_ = child.Wait()
		return fmt.Errorf("the process in the new user namespace did not get ready (%q, %v)", line, rerr)
	}
	if _, err := fmt.Fprintf(stdout, "ready %d\n", child.Process.Pid); err != nil {
		_ = child.Process.Kill()
		_ = child.Wait()
		return err
	}
	return child.Wait()
}
