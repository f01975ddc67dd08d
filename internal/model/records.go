package model

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// Role is what an API key may do.
type Role string

// Roles.
const (
	RoleAdmin  Role = "admin"  // manage keys and projects, import templates, plus everything a member can do
	RoleMember Role = "member" // manage sandboxes and commands of its own project
)

// ParseRole parses s as a role.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleAdmin, RoleMember:
		return Role(s), nil
	}
	return "", fmt.Errorf("%w: role %q must be admin or member", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// Project is a tenant: every sandbox, operation and key belongs to one.
type Project struct {
	ID        ProjectID
	Name      string
	CreatedAt time.Time
}

// APIKey is a management credential. Only the SHA-256 of its secret is stored.
type APIKey struct {
	ID         APIKeyID
	ProjectID  ProjectID
	Role       Role
	Name       string
	SecretHash []byte // SHA-256 of the secret half of the token
	CreatedAt  time.Time
	RevokedAt  *time.Time
}

// SealedSecret is a project's egress secret as the store keeps it: the
// value only sealed (internal/egress/secrets seals and opens it), never in
// clear. The other fields are written by that package and parsed again
// when it opens the secret.
type SealedSecret struct {
	ProjectID ProjectID
	Name      string
	Sealed    []byte
	Hosts     []string // host patterns: exact names or "*.suffix"
	Header    string   // the request header the proxy sets
	Format    string   // the header value, "{value}" standing for the secret
	// Metadata is the owner's key/value data (E2B's secret metadata).
	Metadata map[string]string
	// Version counts the secret's values: 1 when created, one more at
	// each replacement (the store sets it).
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ID is the secret's ID (SecretIDOf).
func (s SealedSecret) ID() SecretID { return SecretIDOf(s.ProjectID, s.Name, s.CreatedAt) }

// Template is an imported, immutable root filesystem plus configuration.
type Template struct {
	Digest    TemplateDigest
	Names     []TaggedName // the tags pointing at this digest, sorted
	SizeBytes int64
	Manifest  []byte // canonical manifest JSON; Digest is its SHA-256
	CreatedAt time.Time
}

// Resources are the limits a sandbox runs under.
type Resources struct {
	CPUs      int // whole vCPUs (CPU quota for containers)
	MemoryMiB int
	DiskMiB   int // size of the sandbox's writable layer
	// HostPids is how many host tasks (processes and threads) the
	// sandbox's host cgroup may hold (its pids.max, or what its VMM may
	// start): its charge against its node's pids budget. Nobody asks for
	// it: admission sets it from the sandbox's environment and memory
	// (environment.HostPids of GuestPids), and the store keeps it. 0: not
	// charged (a sandbox stored before the budget whose migration left
	// none, or a test's).
	HostPids int
}

// Guest pids limits: a sandbox's guest may hold one task per
// GuestPidsPerKiB of its memory, between MinGuestPids and MaxGuestPids.
const (
	// GuestPidsPerKiB: a task costs its sandbox's memory cgroup a kernel
	// stack, its task_struct and, for a process, its page tables and a few
	// pages of its own: measured on the CI host (kernel 6.18), a sleeping
	// process took 200 KiB of its memory cgroup (91 KiB of it kernel
	// memory) and an idle thread about 30 to 75 KiB. A sandbox cannot
	// hold many more real processes than its memory over 256 KiB anyway;
	// a limit above that only lets it take more of the host's process
	// table.
	GuestPidsPerKiB = 256
	MinGuestPids    = 64
	MaxGuestPids    = 1024
)

// GuestPids is the pids limit of a sandbox's workload (the tasks its
// guest may hold): one task per GuestPidsPerKiB of its memory, clamped to
// [MinGuestPids, MaxGuestPids] (32 MiB: 128; 256 MiB and more: 1024).
func GuestPids(memoryMiB int) int {
	n := memoryMiB * 1024 / GuestPidsPerKiB
	return min(max(n, MinGuestPids), MaxGuestPids)
}

// Resource bounds accepted by the API. A server may bound disk_mib lower
// (NodeCapacity.DiskMiB, its --max-disk-mib).
const (
	MinCPUs      = 1
	MaxCPUs      = 64
	MinMemoryMiB = 32
	MaxMemoryMiB = 256 * 1024
	MinDiskMiB   = 64
	MaxDiskMiB   = 16 * 1024 * 1024 // 16 TiB
	// DefaultDiskMiB is the writable layer's size when a create request
	// names none and the server sets no other default (--default-disk-mib);
	// sandboxes stored before disk_mib existed have it too.
	DefaultDiskMiB = 10 * 1024
)

// NodeCapacity is what one sandbox on this node may ask for at most: the
// host's CPUs, its memory times the operator's overcommit, the operator's
// largest writable layer and the node's pids budget (host tasks). Zero
// fields do not bound.
type NodeCapacity struct {
	CPUs      int
	MemoryMiB int
	DiskMiB   int
	Pids      int
}

// ErrExceedsCapacity is wrapped by Resources.FitsNode's errors.
var ErrExceedsCapacity = errors.New("exceeds the node's capacity")

// FitsNode checks that one sandbox of these resources can run on a node of
// capacity c.
func (r Resources) FitsNode(c NodeCapacity) error {
	if c.CPUs > 0 && r.CPUs > c.CPUs {
		return fmt.Errorf("%w: cpus %d, but this node has %d", ErrExceedsCapacity, r.CPUs, c.CPUs)
	}
	if c.MemoryMiB > 0 && r.MemoryMiB > c.MemoryMiB {
		return fmt.Errorf("%w: memory_mib %d, but this node offers at most %d", ErrExceedsCapacity, r.MemoryMiB, c.MemoryMiB)
	}
	if c.DiskMiB > 0 && r.DiskMiB > c.DiskMiB {
		return fmt.Errorf("%w: disk_mib %d, but this server allows at most %d", ErrExceedsCapacity, r.DiskMiB, c.DiskMiB)
	}
	if c.Pids > 0 && r.HostPids > c.Pids {
		return fmt.Errorf("%w: pids: the sandbox may hold %d host tasks, but this node's pids budget is %d", ErrExceedsCapacity, r.HostPids, c.Pids)
	}
	return nil
}

// DefaultResources are used when a create request omits them.
func DefaultResources() Resources {
	return Resources{CPUs: 1, MemoryMiB: 512, DiskMiB: DefaultDiskMiB}
}

// Validate checks the bounds.
func (r Resources) Validate() error {
	if r.CPUs < MinCPUs || r.CPUs > MaxCPUs {
		return fmt.Errorf("%w: cpus must be between %d and %d", ErrInvalid, MinCPUs, MaxCPUs)
	}
	if r.MemoryMiB < MinMemoryMiB || r.MemoryMiB > MaxMemoryMiB {
		return fmt.Errorf("%w: memory_mib must be between %d and %d", ErrInvalid, MinMemoryMiB, MaxMemoryMiB)
	}
	if r.DiskMiB < MinDiskMiB || r.DiskMiB > MaxDiskMiB {
		return fmt.Errorf("%w: disk_mib must be between %d and %d", ErrInvalid, MinDiskMiB, MaxDiskMiB)
	}
	if r.HostPids < 0 {
		return fmt.Errorf("%w: host pids %d must not be negative", ErrInvalid, r.HostPids)
	}
	return nil
}

// Sandbox is the stored record of one sandbox: its spec (immutable after
// create), its lifecycle state and where it runs.
type Sandbox struct {
	ID          SandboxID
	ProjectID   ProjectID
	Template    TemplateDigest // resolved at create time; never a name
	Resources   Resources
	Env         Env
	Metadata    Metadata
	State       SandboxState
	StateReason string // why the sandbox is failed (or other human detail); empty otherwise
	NodeID      NodeID // node that hosts it; empty until placed
	Runtime     string // runtime name on that node, e.g. "runsc"; empty until placed
	// NodeSelector are labels its node must carry (nil: any node); kept to
	// place it again if its node is lost before it started.
	NodeSelector NodeLabels
	// Environment is the execution environment it runs in, chosen at
	// create; empty for sandboxes stored before environments existed
	// (they run on the runtime named by Runtime).
	Environment EnvironmentRef
	// PublicPorts: its guest ports answer without a credential through the
	// E2B gateway (<port>-<id>.<domain>, or the E2b-Sandbox-* headers), as
	// an E2B sandbox's do, but for the code interpreter's (which runs
	// code); immutable after create. Airlock's own ports route
	// (/v1/sandboxes/{id}/ports/…) wants a credential whatever it says.
	PublicPorts bool
	// VolumeMounts are the project's volumes it mounts (read-write), fixed
	// at create; each volume lives on the sandbox's node.
	VolumeMounts []VolumeMount
	// Snapshot is set while the sandbox is suspended (and kept while it
	// wakes): what its suspend wrote.
	Snapshot *Snapshot
	// FromSnapshot, if set, is the saved snapshot the sandbox was created
	// from (a fork, or a create with "snapshot"): its create makes it from
	// the snapshot's files instead of the template alone.
	FromSnapshot SnapshotID
	// Pool is set while the sandbox is an unclaimed sandbox of that warm
	// pool (its project is SystemProject); a claim clears it.
	Pool PoolID
	// Source is how its create got it running (cold until it runs).
	Source   Source
	Timeouts Timeouts
	// LastActivity is when the sandbox was last used, for its idle limit:
	// an API call that changes it or reaches into it, an attached stream
	// (while it is open), stdin, signals, resizes, file transfers
	// (internal/activity). Output of a process nobody is attached to is
	// not seen by the server and does not count.
	LastActivity time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// OperationKind is the lifecycle request an operation tracks.
type OperationKind string

// Operation kinds. Each has one entry in the lifecycle table (lifecycle.go),
// which says what it does; a kind missing there fails TestLifecycleCoversKinds.
const (
	OpCreate  OperationKind = "create"
	OpDelete  OperationKind = "delete"
	OpPause   OperationKind = "pause"
	OpResume  OperationKind = "resume"
	OpSuspend OperationKind = "suspend"
	OpWake    OperationKind = "wake"
	// OpSnapshot takes a live snapshot of a running sandbox into a
	// SnapshotRecord (its Operation), leaving it running.
	OpSnapshot OperationKind = "snapshot"
)

// OperationState is an operation's progress.
type OperationState string

// Operation states. Succeeded and failed are final.
const (
	OpPending   OperationState = "pending"
	OpRunning   OperationState = "running"
	OpSucceeded OperationState = "succeeded"
	OpFailed    OperationState = "failed"
)

// Done reports whether the operation has finished.
func (s OperationState) Done() bool { return s == OpSucceeded || s == OpFailed }

// The codes of a failed operation's error, as the controller and the store
// give them. Each is in the API's error vocabulary (internal/apiv1; a test
// of internal/api keeps the two equal), where clients look them up.
const (
	OpErrRuntime               = "runtime_error"           // the runtime failed a step of the operation (the message says how)
	OpErrCancelled             = "cancelled"               // superseded: the sandbox was deleted, or changed state, before it finished
	OpErrEnvironmentNotEnabled = "environment_not_enabled" // the sandbox runs on a runtime this server does not drive
	OpErrNodeLost              = "node_lost"               // the sandbox's node was declared dead before it finished
	OpErrNotSupported          = "not_supported"           // this server does not know the operation's kind
	OpErrTemplateNotReady      = "template_not_ready"      // the template's ready command did not succeed in time (a worker's coded error)
)

// OperationErrorCodes lists the codes a failed operation's error has.
func OperationErrorCodes() []string {
	return []string{OpErrRuntime, OpErrCancelled, OpErrEnvironmentNotEnabled, OpErrNodeLost, OpErrNotSupported, OpErrTemplateNotReady}
}

// OperationError says why an operation failed.
type OperationError struct {
	Code    string // stable machine code: one of OperationErrorCodes
	Message string
}

// Operation is the asynchronous record of one lifecycle request.
type Operation struct {
	ID        OperationID
	ProjectID ProjectID
	SandboxID SandboxID
	Kind      OperationKind
	State     OperationState
	Error     *OperationError // set when State is failed
	Attempts  int
	// Source, for a create, is how it got the sandbox running; set when
	// it succeeded ("" before).
	Source Source
	// NotBefore is when a retried operation may be claimed again (the
	// controller's backoff); zero: at once.
	NotBefore time.Time
	// TraceParent is the W3C traceparent of the span that recorded the
	// operation (the request's), which the controller's span of running it
	// continues; "" when that was not traced. Read back from the store it
	// is untrusted: the controller parses it and starts a new trace when it
	// does not parse.
	TraceParent string
	// SnapshotKind, for a suspend, is the kind of snapshot it must write
	// ("": the runtime's own): a suspend asked to keep only the filesystem
	// (keep_memory false) carries SnapshotFilesystem, on every attempt.
	SnapshotKind SnapshotKind
	CreatedAt    time.Time
	UpdatedAt    time.Time
	FinishedAt   *time.Time
}

// ProcessSpec is what to run for a command.
type ProcessSpec struct {
	Args    []string      // argv; Args[0] is looked up in PATH
	Env     Env           // added to the sandbox's env
	Cwd     GuestPath     // working directory; "/" if empty (the API fills in the template's when the request names none)
	Stdin   bool          // keep stdin open for writers (else it reads EOF)
	PTY     *TermSize     // run on a pseudo-terminal of this size
	User    *UserIDs      // run as this user (default root; the API fills in the template's when the request names none)
	Timeout time.Duration // kill the process this long after it starts; 0: never
}

// TermSize is a terminal's size in character cells; both are 1–1000.
type TermSize struct {
	Rows, Cols uint16
}

// ParseTermSize checks a terminal size.
func ParseTermSize(rows, cols int) (TermSize, error) {
	if rows < 1 || rows > 1000 || cols < 1 || cols > 1000 {
		return TermSize{}, fmt.Errorf("%w: terminal size %dx%d: rows and cols must be 1–1000", ErrInvalid, rows, cols)
	}
	return TermSize{Rows: uint16(rows), Cols: uint16(cols)}, nil
}

// UserIDs is a numeric user and group inside a sandbox.
type UserIDs struct {
	UID, GID uint32
}

// ParseUserIDs checks numeric user and group IDs (0–2^31-2; 2^32-1 is
// the kernel's "no ID").
func ParseUserIDs(uid, gid int64) (UserIDs, error) {
	const maxID = 1<<31 - 2
	if uid < 0 || uid > maxID || gid < 0 || gid > maxID {
		return UserIDs{}, fmt.Errorf("%w: user %d:%d: IDs must be 0–%d", ErrInvalid, uid, gid, maxID)
	}
	return UserIDs{UID: uint32(uid), GID: uint32(gid)}, nil
}

// MaxProcessTimeout bounds ProcessSpec.Timeout.
const MaxProcessTimeout = 7 * 24 * time.Hour

// CommandSession is the connection info and authorization for one command.
// Its process starts when a client first attaches.
type CommandSession struct {
	ID         CommandSessionID
	ProjectID  ProjectID
	SandboxID  SandboxID
	ProcessID  ProcessID
	Spec       ProcessSpec
	TokenHash  []byte // SHA-256 of the first attachment token issued (a record; tokens are verified by signature)
	CreatedAt  time.Time
	ExpiresAt  time.Time // expiry of the first token; re-issued tokens carry their own
	AttachedAt *time.Time
}
