package bench

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// The limits an Airlock sandbox gets by default (the API's 1 CPU and
// 512 MiB, the worker's 1024 tasks); raw peers get the same, so that both
// pay for the same cgroup setup.
const (
	peerCPUs      = 1
	peerMemoryMiB = 512
	peerPids      = 1024
	cpuPeriod     = 100000
	nofileLimit   = 1 << 20
)

// guestPath is the PATH of the command in a raw peer (the same as the guest
// agent's default).
const guestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// peerArgs returns the command every subject runs.
func peerArgs() []string { return []string{"echo", "hello"} }

// peerOutput is what it must print.
const peerOutput = "hello\n"

// peerSpec builds the config.json of a raw peer's bundle: the namespaces,
// mounts, capabilities, rlimits and resource limits of an Airlock sandbox
// (see internal/runtime/oci), without the guest agent, running echo
// directly.
func peerSpec(flavor oci.Flavor, rootfsDir, hostname string, cg cgroups.Path) (*specs.Spec, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return nil, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	nofile := min(uint64(nofileLimit), rl.Max)
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID"}
	mem := int64(peerMemoryMiB) << 20
	swap := mem
	quota, period := int64(peerCPUs*cpuPeriod), uint64(cpuPeriod)
	pids := int64(peerPids)
	if flavor == oci.FlavorRunsc {
		// As Airlock's driver: the host cgroup also counts the sentry's
		// threads, so its limit is a backstop with headroom.
		pids = 4*pids + 256
	}
	return &specs.Spec{
		Version: "1.0.2",
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            peerArgs(),
			Env:             []string{"HOME=/root", "PATH=" + guestPath},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Ambient: caps},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: rootfsDir},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: cg.String(),
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &mem, Swap: &swap},
				CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:    &specs.LinuxPids{Limit: &pids},
			},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.CgroupNamespace},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
			},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}, nil
}
