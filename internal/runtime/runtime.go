// Package runtime defines the interface between a worker and the technology
// that isolates a sandbox: an OCI runtime (runc, crun, runsc; runtime/oci) or a
// QEMU microvm virtual machine (runtime/qemu). A Runtime owns everything below
// the guest agent: the sandbox's root filesystem, its isolation boundary, its
// resource limits and the byte stream to the agent. Implementations live in
// subpackages and all pass the conformance suite in runtime/runtimetest.
//
// Optional capabilities (pause, memory checkpoint, filesystem snapshot,
// network) are declared by each runtime instance in Info().Capabilities,
// which callers ask: one implementation may drive several runtimes that
// differ (runc and runsc behind one *oci.Runtime), so whether a value has a
// method says nothing about what it can do here. The methods of a capability
// are a separate interface (Pauser, …) that a Runtime claiming it must
// implement (the conformance suite checks this); callers reach them through
// an accessor that asks the capability first (AsPauser).
package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
)

// Errors returned by Runtime implementations.
var (
	// ErrNotFound: the runtime knows no sandbox with that ID.
	ErrNotFound = errors.New("sandbox not found in runtime")
	// ErrNotSupported: the runtime (or this host) cannot do what was asked.
	ErrNotSupported = errors.New("not supported by this runtime")
)

// Info describes a runtime binding on this host. Its isolation class and
// OOM scope are in the words of the execution environment it runs
// (internal/environment), which owns them.
type Info struct {
	Name      string                // "runc", "crun", "runsc", "qemu", …
	Version   string                // as reported by the binary
	Binary    string                // absolute path of the binary
	Isolation environment.Isolation // isolation class
	OOMScope  environment.OOMScope
	// Capabilities are what this runtime instance can do on this host.
	Capabilities Capabilities
}

// Resources are the limits applied to a sandbox.
type Resources struct {
	CPUs        int   // CPU quota in whole CPUs
	MemoryBytes int64 // memory limit; exceeding it is an OOM kill (see Info.OOMScope)
	PidsLimit   int64 // maximum number of tasks inside the sandbox
	// DiskBytes limits the sandbox's writable layer (what the guest writes
	// to its root filesystem): beyond it, writes fail with ENOSPC inside
	// and the host's filesystems do not grow; `df /` inside shows about
	// this size. 0: no limit of its own (the writable layer shares the
	// filesystem of the runtime's state directory).
	DiskBytes int64
}

// Spec is everything a runtime needs to create one sandbox. Each runtime
// keeps per-sandbox state in a directory it derives from the ID under its
// configured state root, so it finds it again after a restart.
type Spec struct {
	ID model.SandboxID
	// RootFS is the sandbox's root filesystem as the worker prepared it.
	RootFS    RootFS
	Hostname  string
	Env       model.Env // environment of the guest agent (and so of every process)
	Resources Resources
	// AgentBinary is the host path of the static airlock-agent binary that
	// the runtime starts as the sandbox's first process.
	AgentBinary string
	// Network, if set, is the sandbox's network, prepared before Create
	// (internal/egress/sandboxnet): the runtime puts the sandbox into it.
	// The server always sets it (every sandbox has a network; see
	// docs/architecture.md §Sandbox network). Nil, as the conformance suite
	// and internal/nodebench leave it: the sandbox has loopback only (an
	// empty network namespace; a VM without a network device).
	Network *Network
	// Restore, if set, is the snapshot a Suspend of this sandbox returned:
	// Create makes the sandbox from it instead of from scratch (its root
	// filesystem's changes, and for a SnapshotMemory its processes, which
	// may run again from Create on: Start is then a no-op). A snapshot of
	// another sandbox, runtime or format is refused. Once the sandbox
	// exists again the snapshot is consumed; a restore that fails keeps
	// it, for another try.
	Restore *Snapshot
	// Volumes are host directories (a volume's data directory on this
	// node, internal/volumedisk) mounted read-write into the guest, so
	// that the guest's root and users may write them: a runtime that
	// cannot refuses a Spec with any (ErrNotSupported).
	Volumes []VolumeMount
	// From, if set, is a snapshot LiveSnapshotter.SnapshotRunning wrote
	// of another sandbox: Create makes this new sandbox (its own ID, state
	// directory, id range and network) from it instead of from the
	// template alone, continuing the source's root filesystem changes and,
	// for a SnapshotMemory, its processes (which run from Create on: Start
	// is then a no-op). The snapshot is read, never consumed: any number
	// of sandboxes are made from it. Spec.Resources.DiskBytes must be the
	// source's. A Create that fails leaves nothing of the new sandbox.
	From *Snapshot
	// Start says that the caller starts the sandbox right after Create (a
	// create that is not stopped half-way): a runtime that can create and
	// start in one step (an OCI runtime's `run --detach`, one exec instead
	// of two) may do so, and Start is then a no-op. A runtime may ignore
	// it; the caller still calls Start, which is idempotent. Without it,
	// Create leaves the sandbox in PhaseCreated.
	Start bool
	// Build marks a template build's sandbox (internal/server,
	// buildsandbox.go): its root may change files' owners and modes as a
	// package manager does (the OCI runtimes grant the capabilities for
	// it inside the sandbox's isolation; a VM's root has them anyway).
	Build bool
}

// VolumeMount is a host directory mounted read-write at a guest path.
type VolumeMount struct {
	Source string          // absolute host path of the directory
	Target model.GuestPath // where the guest sees it
}

// RootFS describes a sandbox's root filesystem. Every runtime gets the
// template's tree: the OCI runtimes put a writable layer of their own over
// Lower; the QEMU runtime makes (once per template and disk size) an ext4
// image of Lower and gives each VM a copy-on-write disk over it.
type RootFS struct {
	// Lower is the template's read-only root filesystem tree (a host
	// path).
	Lower string
}

// Guest paths of the trust store a runtime writes for a Network with a CA.
const (
	// GuestCACert is the deployment CA's certificate alone.
	GuestCACert = "/etc/airlock/ca.crt"
	// GuestCABundle is Debian's trust store: the template's own bundle (if
	// any) with the deployment CA appended, mounted over the template's.
	GuestCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Network is a sandbox's network as a runtime needs it: a prepared network
// namespace whose guest interface (eth0) already has its address and a
// default route, the guest's DNS server and the certificate of the
// deployment's TLS-intercepting CA that the guest must trust.
//
// Container runtimes join NetnsPath: runc and crun as the container's
// network namespace, runsc (--network=sandbox) by running its sandbox in it
// and taking over eth0's configuration into its own network stack.
//
// Hook for microVM runtimes (QEMU, Firecracker): they get the same Network
// and create a TAP device inside NetnsPath, bridge or redirect it to eth0's
// traffic (e.g. tc mirred between eth0 and the TAP) and hand GuestAddr,
// Gateway and DNS to the guest kernel (ip= boot argument or the agent),
// running the VMM itself inside NetnsPath so the host-side veth, addresses
// and nftables rules stay exactly as for containers.
//
// Every runtime installs CACertPEM at GuestCACert and, appended to the
// template's own bundle at GuestCABundle (if any), at GuestCABundle.
type Network struct {
	// NetnsPath is a bind-mounted network namespace file.
	NetnsPath string
	// GuestAddr is eth0's address and prefix (e.g. 10.213.0.2/30).
	GuestAddr netip.Prefix
	// Gateway is the host end of the link, the guest's default route.
	Gateway netip.Addr
	// DNS is the guest's only name server (its /etc/resolv.conf).
	DNS netip.Addr
	// CACertPEM is the PEM certificate of the deployment's CA, added to the
	// guest's trust store; empty: none.
	CACertPEM []byte
}

// Phase is a sandbox's state as the runtime observes it.
type Phase string

// Phases.
const (
	PhaseCreated Phase = "created" // exists, agent not started
	PhaseRunning Phase = "running"
	// PhasePaused: every process is frozen (cgroup freezer, runsc pause),
	// its memory resident; Resume continues it. It is alive: nothing that
	// finds a paused sandbox may destroy or fail it.
	PhasePaused  Phase = "paused"
	PhaseStopped Phase = "stopped" // exists, nothing runs inside
)

// Alive reports whether processes of a sandbox in phase p exist (running or
// paused): such a sandbox is adopted as it is, never recreated.
func (p Phase) Alive() bool { return p == PhaseRunning || p == PhasePaused }

// Pauser is the method set of CapPause. Both methods are idempotent:
// pausing a paused sandbox and resuming a running one are no-ops. They
// return ErrNotFound for an unknown sandbox and an error for one that is
// neither running nor paused.
type Pauser interface {
	// Pause freezes every process of a running sandbox, keeping its memory
	// resident; the sandbox is then in PhasePaused.
	Pause(ctx context.Context, id model.SandboxID) error
	// Resume continues a paused sandbox; it is then in PhaseRunning.
	Resume(ctx context.Context, id model.SandboxID) error
}

// AsPauser returns rt's pause methods if rt claims CapPause, and an error
// wrapping ErrNotSupported otherwise.
func AsPauser(rt Runtime) (Pauser, error) {
	info := rt.Info()
	if !info.Capabilities.Has(CapPause) {
		return nil, fmt.Errorf("pause on %s: %w", info.Name, ErrNotSupported)
	}
	p, ok := rt.(Pauser)
	if !ok {
		return nil, fmt.Errorf("pause on %s: claims %s without implementing runtime.Pauser: %w", info.Name, CapPause, ErrNotSupported)
	}
	return p, nil
}

// SnapshotCreator is implemented by a runtime that may create a sandbox by
// restoring a shared base snapshot instead of booting it (qemu). It only
// reports what Create did — nothing behaves differently on it — so it is
// asked by type, not claimed as a capability.
type SnapshotCreator interface {
	// CreatedFromSnapshot reports whether the sandbox's create restored
	// a base snapshot.
	CreatedFromSnapshot(id model.SandboxID) bool
}

// Status is a runtime's observation of one sandbox.
type Status struct {
	ID        model.SandboxID
	Phase     Phase
	Pid       int  // host PID of the sandbox's init (or VMM), 0 if none
	OOMKilled bool // the sandbox (or, for OOMKillsSandbox runtimes, its host process) was killed for memory
}

// Runtime creates and destroys sandboxes. Every method is idempotent where
// noted, so a reconciler can repeat a step after a crash.
type Runtime interface {
	Info() Info
	// Create prepares the root filesystem and creates the sandbox without
	// starting it. If a sandbox with spec.ID already exists, Create returns nil
	// when it is in PhaseCreated or PhaseRunning and an error otherwise (a
	// paused sandbox is left as it is). A suspended sandbox (see Suspender)
	// is made again only from its snapshot (spec.Restore); a Create without
	// it is an error and leaves the snapshot alone.
	Create(ctx context.Context, spec Spec) error
	// Start starts the guest agent. Starting a running sandbox is a no-op;
	// starting a paused one is an error (Resume continues it).
	Start(ctx context.Context, id model.SandboxID) error
	// State reports the sandbox's phase, or ErrNotFound (also for a
	// suspended sandbox, which has no container: List still names it).
	State(ctx context.Context, id model.SandboxID) (Status, error)
	// Stop kills everything inside the sandbox (also a paused one); it stays
	// in PhaseStopped.
	// Stopping a stopped sandbox is a no-op; ErrNotFound if it does not exist.
	Stop(ctx context.Context, id model.SandboxID) error
	// Delete stops the sandbox if needed and removes every trace of it:
	// runtime state, mounts, cgroups and its state directory. Deleting a
	// sandbox that does not exist is a no-op (it still removes leftovers,
	// e.g. of a create that crashed half-way).
	Delete(ctx context.Context, id model.SandboxID) error
	// List returns the IDs of every sandbox this runtime instance knows of,
	// including ones created before the server restarted and leftovers of
	// half-finished creates (so a reconciler can delete orphans).
	List(ctx context.Context) ([]model.SandboxID, error)
	// DialAgent opens a byte stream to the guest agent of a running sandbox,
	// waiting (until ctx ends) for the agent to start listening. It may be
	// called again at any time (e.g. after a server restart).
	DialAgent(ctx context.Context, id model.SandboxID) (net.Conn, error)
}

// Layer is a sandbox's writable layer on the host: an overlayfs upper
// directory (with overlayfs's whiteouts and opaque directories) whose
// owners are the guest's shifted by IDs (nil: not shifted).
type Layer struct {
	// Dir is the upper directory's host path.
	Dir string
	// IDs, if set, is the sandbox's id range: a file the guest's uid (or
	// gid) N owns belongs to IDs.Host+N on the host.
	IDs *LayerIDs
}

// LayerIDs is the host id range of a sandbox in a user namespace.
type LayerIDs struct {
	Host, Size uint32
}

// LayerReader is implemented by a runtime whose sandboxes' writes land in
// an overlayfs upper directory on the host (the OCI runtimes: runsc runs
// with --overlay2=none). The template builder reads it to make a template
// of what a build sandbox wrote. It is asked by type, as SnapshotCreator.
type LayerReader interface {
	// WritableLayer returns the writable layer of sandbox id, which must
	// exist with its filesystem mounted (running or paused). Its content
	// is stable only while no process of the sandbox runs (paused).
	WritableLayer(id model.SandboxID) (Layer, error)
}

// Usage is a runtime's reading of one sandbox's resource use, from the
// host's side.
type Usage struct {
	CPU time.Duration // CPU time its processes (or its VMM) used so far
	// MemUsed and MemCache: memory charged to it without, and its page
	// cache. Valid unless Guest.
	MemUsed, MemCache int64
	// DiskUsed and DiskTotal: its writable filesystem (the disk image the
	// host mounts). Valid unless Guest; both 0 for a sandbox without a
	// disk of its own.
	DiskUsed, DiskTotal int64
	// Guest: the host cannot see the guest's memory and disk use (a VM's
	// memory is the guest's to manage, its disk the guest's filesystem);
	// the caller asks the guest agent for them.
	Guest bool
}

// UsageReader is implemented by a runtime that can read a sandbox's
// resource use (asked by type: internal/usage samples it).
type UsageReader interface {
	// Usage reads the resource use of a running or paused sandbox;
	// ErrNotFound if it has none (not created, suspended, deleted).
	Usage(ctx context.Context, id model.SandboxID) (Usage, error)
}
