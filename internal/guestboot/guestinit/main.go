//go:build linux

// Command guestinit is PID 1 of the QEMU microVM guest (spike): it loads
// the virtio modules listed in /etc/airlock/modules (finit_module, in
// order), mounts /proc, /sys and /dev, finds the virtio-serial port named
// airlock.agent (or airlock.port=NAME on the kernel command line) through
// /sys/class/virtio-ports/*/name, writes "airlock-guest ready <release>"
// to the console and to the port, and mounts /dev/vda (ext4) on /newroot
// when there is one.
//
// Plan for the real integration (not done here): with a root disk and
// airlock.agent=PATH on the command line, move /dev, /proc and /sys under
// /newroot, switch_root (mount --move /newroot /; chroot .), and exec the
// airlock-agent with the port's device as its transport (agentproto over
// the virtio-serial byte stream), the agent staying PID 1 and reaping
// orphans. Until then it stays up, echoing what the host writes to the
// port, so the host side can be tested.
package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const modulesList = "/etc/airlock/modules"

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stdout, "airlock-init: "+format+"\n", a...)
}

func main() {
	start := time.Now()
	mounts := []struct{ src, dst, fstype string }{
		{"devtmpfs", "/dev", "devtmpfs"},
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
	}
	for _, m := range mounts {
		if err := unix.Mount(m.src, m.dst, m.fstype, unix.MS_NOSUID, ""); err != nil && err != unix.EBUSY {
			logf("mount %s: %v", m.dst, err)
		}
	}
	// The console the kernel opened for us may predate devtmpfs; reopen it.
	if f, err := os.OpenFile("/dev/console", os.O_RDWR, 0); err == nil {
		os.Stdout, os.Stderr = f, f
	}
	loadModules()

	var u unix.Utsname
	_ = unix.Uname(&u)
	release := unix.ByteSliceToString(u.Release[:])
	line := "airlock-guest ready " + release
	logf("modules loaded in %v", time.Since(start))
	fmt.Fprintln(os.Stdout, line)

	portName := cmdlineParam("airlock.port", "airlock.agent")
	port, err := findPort(portName, 5*time.Second)
	if err != nil {
		logf("%v", err)
		halt()
	}
	logf("port %s is %s", portName, port.Name())
	writeLine(port, line)

	if root := mountRoot(); root != "" {
		writeLine(port, "airlock-guest root "+root)
	}
	// Spike: echo the host's lines back, prefixed, until powered off.
	sc := bufio.NewScanner(port)
	for sc.Scan() {
		writeLine(port, "echo "+sc.Text())
	}
	logf("port closed: %v", sc.Err())
	halt()
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

// findPort waits for the virtio-serial port named name and opens it.
func findPort(name string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			f, err := os.OpenFile(dev, os.O_RDWR, 0)
			if err == nil {
				return f, nil
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("open %s: %w", dev, err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port named %q (found %d ports)", name, len(names))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeLine writes to the port, retrying while the host is not connected.
func writeLine(f *os.File, s string) {
	for i := 0; i < 500; i++ {
		_, err := f.WriteString(s + "\n")
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	logf("write to port failed")
}

// mountRoot mounts /dev/vda (ext4, read-write) on /newroot when present.
func mountRoot() string {
	if _, err := os.Stat("/dev/vda"); err != nil {
		return ""
	}
	if err := unix.Mount("/dev/vda", "/newroot", "ext4", 0, ""); err != nil {
		logf("mount /dev/vda: %v", err)
		return ""
	}
	logf("mounted /dev/vda on /newroot")
	ents, _ := os.ReadDir("/newroot")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return "/dev/vda ext4 " + strings.Join(names, ",")
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
