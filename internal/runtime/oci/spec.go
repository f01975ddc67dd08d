package oci

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// Guest paths of the agent's files.
const (
	GuestAgentPath  = "/.airlock/bin/airlock-agent"
	GuestRunDir     = "/.airlock/run"
	GuestSocketPath = GuestRunDir + "/" + socketName
	socketName      = "agent.sock"
)

// ociVersion is the spec version written to config.json: the oldest that
// has every field used here, so every supported runtime accepts it.
const ociVersion = "1.0.2"

// defaultPath is the PATH of the guest agent unless the sandbox's Env sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// cpuPeriod is the CFS period; the quota is CPUs × cpuPeriod.
const cpuPeriod = 100000

// nofileLimit is the guest's RLIMIT_NOFILE unless the host's hard limit is
// lower (root here lacks CAP_SYS_RESOURCE and cannot raise it).
const nofileLimit = 1 << 20

// defaultCaps returns `runc spec`'s capability set plus CAP_SETUID and
// CAP_SETGID, which the agent needs to start a command as another user
// (docker's default set has both) — a fresh slice each time: the spec's
// four sets must not alias one another. A process started as a non-root
// user loses them all at its setuid.
func defaultCaps() []string {
	return []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETUID"}
}

// buildCaps are added to defaultCaps for a template build's sandbox
// (runtime.Spec.Build): what root needs to install software (dpkg and
// chown give files owners, modes and capabilities; chroot-based
// maintainer scripts), as Docker's default set has them. They are scoped
// like the others: to the sandbox's user namespace (runc, crun) or to
// gVisor's kernel (runsc).
var buildCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_SETFCAP", "CAP_SYS_CHROOT"}

// hostPidsLimit is the host pids limit of a sandbox whose guest limit is n:
// environment.HostPids, the one rule that admission charges against the
// node's pids budget too. The agent enforces n on the workload in a cgroup
// of its own (--pids-max, sealed read-only: seal.go); the host limit keeps
// room for the agent beside it (runc, crun) or is a backstop with headroom
// for the sentry, gofer and stubs (runsc).
func hostPidsLimit(flavor Flavor, n int64) int64 {
	return int64(environment.HostPids(environment.Name(flavor), int(n)))
}

// agentPidsReserve is the room the host pids limit of a runc or crun
// sandbox keeps for the agent's threads and its short-lived helpers.
const agentPidsReserve = environment.AgentPidsReserve

// bundleSpec builds the OCI config.json of a sandbox; ids is its user
// namespace's id range (nil: none, runsc), agent its agent's file on the
// shared agent filesystem.
func (r *Runtime) bundleSpec(spec runtime.Spec, dirs sandboxDirs, ids *rootfs.IDRange, agent string) (*specs.Spec, error) {
	cg, err := r.cgroupPath(spec.ID)
	if err != nil {
		return nil, err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID.String()
	}
	// --log-to-memory: after start-up the agent logs into memory and its
	// stdout/stderr (this host's agent.log) point at /dev/null, so a guest
	// cannot fill the host's disk through /proc/1/fd/2.
	// --host-peers-only: the agent accepts only connections from outside
	// the sandbox's PID namespace (the host's), not the workload's.
	args := []string{GuestAgentPath, "--listen", "unix:" + GuestSocketPath, "--log-to-memory", "--host-peers-only"}
	if spec.Resources.PidsLimit > 0 {
		args = append(args, "--pids-max", strconv.FormatInt(spec.Resources.PidsLimit, 10))
	}
	// --seal: the workload can neither touch the agent's socket nor (under
	// gVisor) lift the agent's pids limit (seal.go).
	args = append(args, sealArgs...)
	s, err := r.ociSpec(specParams{
		args:        args,
		env:         guestEnv(spec.Env),
		rootfs:      dirs.rootfs,
		hostname:    hostname,
		cgroup:      cg,
		agentBinary: agent, // on the shared tmpfs: its mount table shows /<digest>, no host path
		runDir:      dirs.run,
		resources:   spec.Resources,
		ids:         ids,
		usernsPath:  dirs.usernsPath,
		build:       spec.Build,
	})
	if err != nil {
		return nil, err
	}
	if r.flavor == FlavorRunsc {
		s.Mounts = append(s.Mounts, runscTmpMount(dirs.rootfs))
	}
	if err := applyNetwork(r.flavor, s, spec, dirs); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if spec.Network != nil && r.runcInheritsNetns() {
		inheritNetns(s)
	}
	grantSealing(s)
	return s, nil
}

// runscTmpMount binds the root filesystem's own /tmp (which prepare
// creates) onto /tmp. Without a /tmp mount gVisor puts a tmpfs of its own
// on an empty /tmp, so what the guest writes there lives in the sentry's
// memory: beyond the disk limit, and an OOM kill of the whole sandbox
// instead of ENOSPC.
func runscTmpMount(rootfs string) specs.Mount {
	return specs.Mount{Destination: "/tmp", Type: "bind", Source: filepath.Join(rootfs, "tmp"), Options: []string{"rbind", "rw"}}
}

// specParams are what differs between sandboxes (and the probe container).
type specParams struct {
	args        []string
	env         []string
	rootfs      string
	hostname    string
	cgroup      cgroups.Path
	agentBinary string // bind-mounted read-only at GuestAgentPath
	runDir      string // bind-mounted read-write at GuestRunDir; "" for none
	resources   runtime.Resources
	ids         *rootfs.IDRange // the user namespace's id range; nil for none
	usernsPath  string          // with ids: where the sandbox's user namespace is bind-mounted (sandboxUserns)
	build       bool            // a template build's sandbox: buildCaps too
}

func (r *Runtime) ociSpec(p specParams) (*specs.Spec, error) {
	if !filepath.IsAbs(p.agentBinary) {
		return nil, fmt.Errorf("agent binary %q must be an absolute path", p.agentBinary)
	}
	s, err := BaseSpec(r.flavor, BaseParams{
		Args: p.args, Env: p.env, Rootfs: p.rootfs, Hostname: p.hostname, Cgroup: p.cgroup, Resources: p.resources, IDs: p.ids, UsernsPath: p.usernsPath,
		Build: p.build,
	})
	if err != nil {
		return nil, err
	}
	s.Mounts = append(s.Mounts, specs.Mount{Destination: GuestAgentPath, Type: "bind", Source: p.agentBinary, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	if p.runDir != "" {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: GuestRunDir, Type: "bind", Source: p.runDir, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	return s, nil
}

// BaseParams are what differs between containers built on a sandbox's spec.
type BaseParams struct {
	Args, Env        []string
	Rootfs, Hostname string
	Cgroup           cgroups.Path
	Resources        runtime.Resources
	// IDs, if set, puts the container in a new user namespace mapping
	// its ids 0–Size-1 onto this host range (runc and crun sandboxes); the
	// root filesystem must then be owned by the range (an idmapped view).
	IDs *rootfs.IDRange
	// UsernsPath, with IDs, is a user namespace of that mapping for the
	// container to join (a sandbox's own, owned by IDs' first host id;
	// see addUserns for runc's rlimits there); "" has the runtime make
	// one (owned by host root).
	UsernsPath string
	// Build gives root buildCaps too (a template build's sandbox).
	Build bool
}

// BaseSpec builds the OCI config of an Airlock sandbox without the guest
// agent's mounts: its namespaces (a new, empty network namespace: loopback
// only, unless the sandbox's network replaces it (applyNetwork); a user
// namespace with p.IDs), mounts, capabilities, rlimits, resource limits and, for runc and
// crun, the seccomp filter (seccompProfile). The benchmark's
// raw peers are built from it, so that they pay for exactly what a sandbox
// pays.
func BaseSpec(flavor Flavor, p BaseParams) (*specs.Spec, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return nil, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	nofile := min(uint64(nofileLimit), rl.Max)
	caps := defaultCaps
	if p.Build {
		caps = func() []string { return append(defaultCaps(), buildCaps...) }
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: devOptions(flavor)},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		// gVisor always mounts its own (emulated) cgroupfs read-write, which
		// the agent needs for --pids-max; runc and crun honour "ro".
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
	s := &specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: p.Args,
			Env:  p.Env,
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  caps(),
				Effective: caps(),
				Permitted: caps(),
				Ambient:   caps(),
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
			// Set-user-ID programs work (sudo for E2B's user): they reach
			// the sandbox's root, whose capabilities are only the bounding
			// set's (defaultCaps, once the agent's seal dropped its own),
			// which any command run as root has anyway (docs/security.md).
			NoNewPrivileges: false,
		},
		Root:     &specs.Root{Path: p.Rootfs, Readonly: false},
		Hostname: p.Hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: p.Cgroup.String(),
			Resources:   resources(flavor, p.Resources),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace}, // new and empty (loopback only) unless applyNetwork joins one
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
	}
	if p.IDs != nil {
		if flavor == FlavorRunsc {
			return nil, fmt.Errorf("a user namespace of Airlock's making is for runc and crun; runsc has its own")
		}
		addUserns(flavor, s, *p.IDs, p.UsernsPath)
	}
	// gVisor filters the guest's system calls itself (its sentry implements
	// them); a profile would only filter what the sentry emulates.
	if flavor != FlavorRunsc {
		profile, err := seccompProfile(s)
		if err != nil {
			return nil, err
		}
		s.Linux.Seccomp = profile
	}
	return s, nil
}

// devOptions are the options of the guest's /dev mount. runc and crun
// mount a tmpfs of 64 MiB there (charged to the sandbox's memory cgroup),
// and create the device nodes in it. gVisor always mounts its own /dev
// filesystem instead, whatever the spec's type: a tmpfs in the sentry's
// memory that ignores size= (runsc/boot/vfs.go compileMounts makes every
// /dev mount its "dev" type, whose GetFilesystem passes only mode=0755 to
// its tmpfs), so 600 MB written there OOM-killed a 256 MiB sandbox. It
// does honour "ro" (ParseMountOptions): under runsc /dev is read-only,
// with its device nodes still usable (opening a device file for writing
// skips the mount's write check) and /dev/shm and /dev/pts their own
// mounts below it (/dev/shm a tmpfs whose size= gVisor honours). /dev/mqueue
// is not mounted by gVisor (it has no mqueue mount type; the spec's entry
// is ignored).
func devOptions(flavor Flavor) []string {
	opts := []string{"nosuid", "strictatime", "mode=755", "size=65536k"}
	if flavor == FlavorRunsc {
		opts = append(opts, "ro")
	}
	return opts
}

func resources(flavor Flavor, res runtime.Resources) *specs.LinuxResources {
	out := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if res.MemoryBytes > 0 {
		limit, swap := res.MemoryBytes, res.MemoryBytes // memory+swap = memory: no swap
		out.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}
	if res.CPUs > 0 {
		quota, period := int64(res.CPUs)*cpuPeriod, uint64(cpuPeriod)
		out.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if res.PidsLimit > 0 {
		limit := hostPidsLimit(flavor, res.PidsLimit)
		out.Pids = &specs.LinuxPids{Limit: &limit}
	}
	return out
}

// guestEnv is the agent's environment: the sandbox's Env plus defaults, sorted.
func guestEnv(sandboxEnv model.Env) []string {
	env := map[string]string{"PATH": defaultPath, "HOME": "/root"}
	for k, v := range sandboxEnv {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
