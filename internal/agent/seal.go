package agent

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs/mountinfo"
)

// Capabilities that the runtime grants the agent only so that it can seal
// the sandbox (SealMounts) and drop them again (DropCapabilities) before any
// workload process exists.
var SetupCapabilities = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}

// SealMounts makes dirs and, if cgroups is set, every writable cgroup mount
// read-only for every process of the sandbox, the agent included: each gets
// a bind mount of itself on top, remounted read-only (plus nosuid, nodev,
// noexec). The mount below stays writable but is reachable only through
// descriptors opened before (the workload cgroup's, held by the agent's
// spawner): a workload cannot unmount the read-only one without
// CAP_SYS_ADMIN. It needs CAP_SYS_ADMIN and returns the paths it sealed.
//
// Under gVisor this is what keeps a workload (root) from raising the
// workload cgroup's pids.max or moving itself out of it; everywhere it
// keeps the agent's socket and run directory as they are.
func SealMounts(dirs []string, cgroups bool) ([]string, error) {
	targets := slices.Clone(dirs)
	if cgroups {
		mounts, err := mountinfo.Read()
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		for _, m := range mounts {
			if (m.FSType == "cgroup" || m.FSType == "cgroup2") && !slices.Contains(targets, m.MountPoint) {
				targets = append(targets, m.MountPoint)
			}
		}
	}
	var sealed []string
	for _, dir := range targets {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return sealed, fmt.Errorf("seal %s: %w", dir, err)
		}
		if st.Flags&unix.ST_RDONLY != 0 {
			continue // read-only already (runc and crun mount cgroupfs so)
		}
		if err := sealMount(dir, st.Flags); err != nil {
			return sealed, err
		}
		sealed = append(sealed, dir)
	}
	return sealed, nil
}

// sealMount stacks a read-only bind mount of dir on dir and checks it took.
func sealMount(dir string, statFlags int64) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("seal %s: bind mount: %w", dir, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	// Keep the access-time mode: a mount whose flags are locked (one made
	// in a more privileged user namespace) refuses a change of it.
	switch {
	case statFlags&unix.ST_NOATIME != 0:
		flags |= unix.MS_NOATIME
	case statFlags&unix.ST_RELATIME != 0:
		flags |= unix.MS_RELATIME
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("seal %s: remount read-only: %w", dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("seal %s: %w", dir, err)
	}
	if st.Flags&unix.ST_RDONLY == 0 {
		return fmt.Errorf("seal %s: still writable after the read-only remount", dir)
	}
	return nil
}

// errAllThreads: the process cannot change the credentials of all its
// threads at once (a cgo binary; the agent is built without cgo).
var errAllThreads = errors.New("cannot change the capabilities of every thread (built with cgo?)")

// DropCapabilities removes caps from the bounding set and from the
// effective, permitted and inheritable sets (so from the ambient set too)
// of every thread of the process, and checks that none is left: no process
// the agent starts afterwards can regain them, not even as root. Dropping
// from the bounding set needs CAP_SETPCAP, so drop that last or with the
// others.
func DropCapabilities(caps []uintptr) error {
	for _, c := range caps {
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); e != 0 {
			if e == unix.ENOTSUP {
				return errAllThreads
			}
			if e == unix.EINVAL { // unknown to this kernel: nobody has it
				continue
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, e)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, c := range caps {
		mask := ^uint32(1 << (c % 32))
		d := &data[c/32]
		d.Effective &= mask
		d.Permitted &= mask
		d.Inheritable &= mask
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		if e == unix.ENOTSUP {
			return errAllThreads
		}
		return fmt.Errorf("capset: %w", e)
	}
	return checkDropped(caps)
}

// checkDropped fails if this thread still has one of caps in any set.
func checkDropped(caps []uintptr) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, c := range caps {
		bit := uint32(1 << (c % 32))
		d := data[c/32]
		if (d.Effective|d.Permitted|d.Inheritable)&bit != 0 {
			return fmt.Errorf("capability %d is still held after dropping it", c)
		}
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0); err == nil && in != 0 {
			return fmt.Errorf("capability %d is still in the bounding set after dropping it", c)
		}
	}
	return nil
}
