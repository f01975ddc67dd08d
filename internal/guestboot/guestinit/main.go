//go:build linux

// Package guestinit is PID 1 of the QEMU microVM guest's initramfs, run by
// the airlock-agent binary itself (the initramfs's /init is the agent: it
// calls Main when it starts as PID 1 under that name). It
// mounts /dev, /proc and /sys, loads the virtio modules listed in
// /etc/airlock/modules (finit_module, in order), writes "airlock-guest
// ready <release>" to the console, and then hands the machine to the
// airlock-agent:
//
//  1. mounts the root disk /dev/vda (ext4) on /newroot;
//  2. mounts a tmpfs on /newroot/run and copies the agent (its own binary,
//     /proc/self/exe) to /newroot/run/airlock/airlock-agent;
//  3. moves /dev, /proc and /sys under /newroot and mounts /dev/pts
//     (devpts) and /dev/shm (tmpfs) there;
//  4. frees the initramfs (removes its files, as switch_root does, never
//     crossing into another file system);
//  5. moves /newroot onto /, chroots into it and executes the agent with
//     --listen serial:<port> (the virtio-serial port's name: airlock.port=
//     on the kernel command line, default airlock.agent),
//     --poweroff-on-exit and --pids-max (a cgroup2 at /sys/fs/cgroup holds
//     its workload cgroup, whose limit the host sets). The agent stays PID
//     1 and reaps orphans.
//
// Any failure is written to the console and powers the VM off (QEMU runs
// with -no-reboot and -no-shutdown: it stays, stopped, with the console
// readable, until the host ends it).
package guestinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	modulesList = "/etc/airlock/modules"
	agentSrc    = "/proc/self/exe"
	newRoot     = "/newroot"
	agentDir    = "/run/airlock"
	agentPath   = agentDir + "/airlock-agent"
	rootDisk    = "/dev/vda"
	defaultPort = "airlock.agent"
	// diskWait bounds the wait for the root disk to appear (virtio_blk
	// probes after its module loaded).
	diskWait = 5 * time.Second
	// guestPidsUnlimited is PID_MAX_LIMIT: the most pids a Linux kernel
	// has.
	guestPidsUnlimited = 4 << 20
)

var console io.Writer = os.Stdout

func logf(format string, a ...any) {
	fmt.Fprintf(console, "airlock-init: "+format+"\n", a...)
}

// Main runs the guest init; it returns only if it could not power off.
func Main() {
	start := time.Now()
	for _, m := range []struct{ src, dst, fstype string }{
		{"devtmpfs", "/dev", "devtmpfs"},
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
	} {
		if err := unix.Mount(m.src, m.dst, m.fstype, unix.MS_NOSUID, ""); err != nil && err != unix.EBUSY {
			logf("mount %s: %v", m.dst, err)
		}
	}
	// The console the kernel opened for us may predate devtmpfs; reopen it
	// and make it the agent's stdin, stdout and stderr too.
	if f, err := os.OpenFile("/dev/console", os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup2(int(f.Fd()), fd)
		}
		f.Close()
	}
	loadModules()

	var u unix.Utsname
	_ = unix.Uname(&u)
	release := unix.ByteSliceToString(u.Release[:])
	logf("modules loaded in %v", time.Since(start))
	fmt.Fprintln(console, "airlock-guest ready "+release)

	port := cmdlineParam("airlock.port", defaultPort)
	if err := switchToAgent(port); err != nil {
		logf("FATAL: %v; powering off", err)
		halt()
	}
}

func loadModules() {
	data, err := os.ReadFile(modulesList)
	if err != nil {
		logf("%v", err)
		return
	}
	for _, p := range strings.Fields(string(data)) {
		f, err := os.Open(p)
		if err != nil {
			logf("%v", err)
			continue
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			logf("finit_module %s: %v", filepath.Base(p), err)
		}
	}
}

// switchToAgent makes the root disk the root and executes the agent; it
// returns only on failure.
func switchToAgent(port string) error {
	if err := waitFor(rootDisk, diskWait); err != nil {
		return fmt.Errorf("no root disk: %w", err)
	}
	if err := unix.Mount(rootDisk, newRoot, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s (ext4) on %s: %w", rootDisk, newRoot, err)
	}
	run := newRoot + "/run"
	if err := os.MkdirAll(run, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", run, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", run, err)
	}
	if err := copyFile(agentSrc, newRoot+agentPath); err != nil {
		return fmt.Errorf("copy the agent: %w", err)
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if err := os.MkdirAll(newRoot+d, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(d, newRoot+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s to %s: %w", d, newRoot+d, err)
		}
	}
	for _, m := range []struct{ dst, fstype, data string }{
		{"/dev/pts", "devpts", "ptmxmode=0666,newinstance,mode=0620"},
		{"/dev/shm", "tmpfs", "mode=1777"},
		// The agent's workload cgroup (--pids-max) lives here.
		{"/sys/fs/cgroup", "cgroup2", ""},
	} {
		if err := os.MkdirAll(newRoot+m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, newRoot+m.dst, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	if err := freeInitramfs(); err != nil {
		// Not fatal: the initramfs only keeps using memory.
		logf("freeing the initramfs: %v", err)
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s onto /: %w", newRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	// --log-to-memory: once listening, the agent logs into a ring it
	// serves at GET /v1/logs and points stdout and stderr (the console)
	// at /dev/null.
	// --pids-max: every process the agent starts runs in a pids cgroup,
	// unlimited (the kernel's largest pid count) until the host sets the
	// sandbox's limit (GuestConfig.PidsMax, at every start and wake: base
	// snapshots are booted once for sandboxes of any limit).
	argv := []string{"airlock-agent", "--listen", "serial:" + port, "--poweroff-on-exit", "--log-to-memory", "--pids-max", strconv.Itoa(guestPidsUnlimited)}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	logf("starting %s", strings.Join(argv, " "))
	err := unix.Exec(agentPath, argv, env)
	return fmt.Errorf("exec %s: %w", agentPath, err)
}

// waitFor waits until path exists.
func waitFor(path string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		_, err := os.Stat(path)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// copyFile copies the executable src to dst (mode 0700, its directory 0700).
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// freeInitramfs removes the initramfs's files (everything on the root file
// system but /newroot), never descending into another file system.
func freeInitramfs() error {
	var root unix.Stat_t
	if err := unix.Lstat("/", &root); err != nil {
		return err
	}
	ents, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if "/"+e.Name() == newRoot {
			continue
		}
		errs = append(errs, removeSameDev("/"+e.Name(), root.Dev))
	}
	return errors.Join(errs...)
}

func removeSameDev(p string, dev uint64) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	if st.Dev != dev {
		return nil // a mount point of something else: leave it
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := removeSameDev(filepath.Join(p, e.Name()), dev); err != nil {
				return err
			}
		}
		return unix.Rmdir(p)
	}
	return unix.Unlink(p)
}

func cmdlineParam(key, def string) string {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return def
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return def
}

// halt powers the VM off (with -no-reboot, QEMU exits); PID 1 must not
// return.
func halt() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}
