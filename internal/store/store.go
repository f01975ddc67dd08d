// Package store defines Airlock's persistent desired state: projects, API keys,
// templates, sandboxes, operations, command sessions and idempotency records.
//
// One interface, two implementations that share one set of versioned
// migrations: SQLite (internal/store/sqlite, the embedded default) and
// PostgreSQL (internal/store/postgres). Both pass the conformance suite in
// internal/store/storetest. Command output never enters the store.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// Errors returned by every Store implementation. Callers test them with
// errors.Is; implementations wrap them with context.
var (
	// ErrNotFound: the row does not exist (or is not visible to the project).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a row with the same unique key exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrStateChanged: a compare-and-swap on a sandbox's state found a state
	// other than the expected one.
	ErrStateChanged = errors.New("sandbox state changed concurrently")
	// ErrLeaseLost: the caller no longer holds the lease on an operation.
	ErrLeaseLost = errors.New("operation lease lost")
	// ErrNoWork: ClaimOperation found nothing claimable.
	ErrNoWork = errors.New("no claimable operation")
	// ErrInUse: a row that live rows still reference (an egress profile a
	// live sandbox's policy names) cannot be deleted.
	ErrInUse = errors.New("in use")
	// ErrBusy: another lifecycle operation of the sandbox is under way.
	// It wraps model.ErrInvalidTransition: the request conflicts with the
	// sandbox's state.
	ErrBusy = fmt.Errorf("%w: another operation of the sandbox is under way", model.ErrInvalidTransition)
	// ErrVolumeNotFound: a volume a sandbox is to mount does not exist in
	// its project. It wraps ErrNotFound.
	ErrVolumeNotFound = fmt.Errorf("%w: volume", ErrNotFound)
	// ErrVolumeElsewhere: a volume a sandbox is to mount lives on another
	// node than the one the sandbox was placed on.
	ErrVolumeElsewhere = errors.New("the volume lives on another node")
)

// Volumes are a project's persistent volumes (see model.Volume).
type Volumes interface {
	// CreateVolume stores a new volume (no node yet). A name the project
	// already uses is ErrAlreadyExists, an unknown project ErrNotFound; a
	// volume that would take the project's volumes over maxTotalMiB (0:
	// no limit) together is refused with a *model.QuotaExceededError
	// (limit model.VolumeQuotaLimit), checked in the insert's transaction
	// under the project's row lock: racing creates cannot both fit. idem,
	// if set, is stored in the same transaction (an
	// *IdempotencyConflictError if its key has one already).
	CreateVolume(ctx context.Context, v model.Volume, maxTotalMiB int64, idem *IdempotencyRecord) error
	// GetVolume returns a volume of the project by ID or name; another
	// project's is ErrNotFound.
	GetVolume(ctx context.Context, project model.ProjectID, ref model.VolumeRef) (model.Volume, error)
	// GetVolumeByID returns a volume of any project (a node's reconciler).
	GetVolumeByID(ctx context.Context, id model.VolumeID) (model.Volume, error)
	// ListVolumes lists the project's volumes by name.
	ListVolumes(ctx context.Context, project model.ProjectID) ([]model.Volume, error)
	// VolumeUsers lists the sandboxes not deleted that mount the volume.
	VolumeUsers(ctx context.Context, id model.VolumeID) ([]model.SandboxID, error)
	// DeleteVolume removes a volume's row and returns it. A volume that a
	// sandbox not deleted mounts is ErrInUse (checked under the volume's
	// row lock, which a create that mounts it takes too).
	DeleteVolume(ctx context.Context, project model.ProjectID, id model.VolumeID) (model.Volume, error)
	// BindVolumeNode binds a volume without a node to node and returns it
	// with its node (a volume bound already keeps its own).
	BindVolumeNode(ctx context.Context, project model.ProjectID, id model.VolumeID, node model.NodeID) (model.Volume, error)
}

// IdempotencyRecord is the stored result of a mutating request made with an
// Idempotency-Key. The raw key is never stored: KeyHash is its SHA-256, and
// SealedBody is the response body encrypted with a key derived from the raw
// key (see internal/api), so a reader of the database learns neither.
type IdempotencyRecord struct {
	ProjectID   model.ProjectID
	KeyHash     []byte // SHA-256 of the Idempotency-Key
	Method      string
	Path        string
	RequestHash []byte // SHA-256 over method, path and canonical body
	Status      int
	SealedBody  []byte
	CreatedAt   time.Time
}

// IdempotencyConflictError is returned by a mutation whose idempotency record
// could not be inserted because one with the same (project, key) exists. The
// mutation itself was not applied. Existing is the stored record.
type IdempotencyConflictError struct {
	Existing IdempotencyRecord
}

func (e *IdempotencyConflictError) Error() string {
	return "idempotency key already used"
}

// SandboxCursor is a position in the (created_at, id) order of sandboxes.
type SandboxCursor struct {
	CreatedAt time.Time
	ID        model.SandboxID
}

// SandboxQuery selects sandboxes of one project.
type SandboxQuery struct {
	ProjectID model.ProjectID
	States    []model.SandboxState // empty: every state
	Metadata  map[string]string    // every pair must match exactly
	Limit     int                  // 1..1000
	After     *SandboxCursor       // exclusive; nil starts at the beginning
}

// SandboxPage is one page of a sandbox listing, in (created_at, id) order.
type SandboxPage struct {
	Sandboxes []model.Sandbox
	Next      *SandboxCursor // nil on the last page
}

// OperationCursor is a position in the (created_at, id) descending order
// of an operation listing.
type OperationCursor struct {
	CreatedAt time.Time
	ID        model.OperationID
}

// OperationQuery selects operations of one project, newest first.
type OperationQuery struct {
	ProjectID model.ProjectID
	SandboxID model.SandboxID        // "": every sandbox
	States    []model.OperationState // empty: every state
	Kinds     []model.OperationKind  // empty: every kind
	Limit     int                    // 1..1000
	After     *OperationCursor       // exclusive; nil starts at the newest
}

// OperationPage is one page of an operation listing, newest first.
type OperationPage struct {
	Operations []model.Operation
	Next       *OperationCursor // nil on the last page
}

// DeleteRequest asks to move a sandbox to deleting and queue its delete
// operation, atomically.
type DeleteRequest struct {
	ProjectID   model.ProjectID
	SandboxID   model.SandboxID
	Operation   model.Operation // kind delete, state pending
	Idempotency *IdempotencyRecord
	Now         time.Time
	// Reason, if set, replaces the sandbox's state reason (else it is kept).
	Reason string
}

// Claim describes which operations a controller may take.
type Claim struct {
	Owner model.NodeID // lease holder
	// Incarnation is the holder's current incarnation, its fencing token:
	// operations are claimed, renewed, retried and finished only while it
	// is the node's current one and the node is not dead (ErrFenced).
	// Template builds, which are not a node's, ignore it.
	Incarnation model.Incarnation
	Lease       time.Duration // lease length from Now
	Now         time.Time
}

// Retry gives up Owner's lease on a running operation after a transient
// failure: the operation stays unfinished, nobody holds it, and no claim
// takes it before NotBefore (compared with the claim's Now).
type Retry struct {
	OperationID model.OperationID
	Owner       model.NodeID
	Incarnation model.Incarnation
	NotBefore   time.Time
	Now         time.Time
}

// Finish ends an operation held by Owner. If SandboxTo is set, the sandbox
// moves from SandboxFrom to SandboxTo in the same transaction (the state
// machine must allow it); if its current state is not SandboxFrom, nothing is
// written and ErrStateChanged is returned.
type Finish struct {
	OperationID   model.OperationID
	Owner         model.NodeID
	Incarnation   model.Incarnation
	State         model.OperationState // succeeded or failed
	Error         *model.OperationError
	SandboxFrom   model.SandboxState
	SandboxTo     model.SandboxState // empty: leave the sandbox alone
	SandboxReason string
	// SetSnapshot, with SandboxTo set, replaces the sandbox's snapshot
	// record by Snapshot (nil: it has none) in the same transaction.
	SetSnapshot bool
	Snapshot    *model.Snapshot
	// Source, if set, records how a create got its sandbox running, on
	// the operation and the sandbox.
	Source model.Source
	Now    time.Time
}

// OperationRequest asks to start a lifecycle operation on an existing
// sandbox (any kind but create and delete, which have their own calls): the
// sandbox moves to the kind's in-progress state and the operation is queued,
// atomically.
type OperationRequest struct {
	ProjectID   model.ProjectID
	SandboxID   model.SandboxID
	Operation   model.Operation // pending, of the request's kind
	Idempotency *IdempotencyRecord
	Now         time.Time
	Reason      string // the sandbox's state reason while it is in progress, e.g. "idle for 6h0m0s"
}

// BuildCursor is a position in the (created_at, id) order of builds.
type BuildCursor struct {
	CreatedAt time.Time
	ID        model.BuildID
}

// Scope is whose rows a read sees: one project's, or every project's
// (and the server's own). The zero Scope is neither, and a read given it
// fails with model.ErrInvalid, so a caller that forgets to say whose rows
// it wants sees none.
type Scope struct {
	project model.ProjectID
	all     bool
}

// AllProjects is the scope of every project's rows and the server's own
// (an admin's, or the server's internal reads).
func AllProjects() Scope { return Scope{all: true} }

// OnlyProject is the scope of project p's rows; p must not be empty.
func OnlyProject(p model.ProjectID) Scope { return Scope{project: p} }

// Project returns the one project the scope is limited to, or ok false
// for AllProjects. A zero Scope (or OnlyProject("")) is an error.
func (s Scope) Project() (p model.ProjectID, limited bool, err error) {
	switch {
	case s.all:
		return "", false, nil
	case s.project == "":
		return "", false, fmt.Errorf("%w: a read without a scope (AllProjects or OnlyProject)", model.ErrInvalid)
	}
	return s.project, true, nil
}

// BuildQuery selects template builds.
type BuildQuery struct {
	Scope  Scope              // whose builds (required)
	Name   model.TaggedName   // zero: any
	States []model.BuildState // empty: every state
	Limit  int                // 1..1000
	Before *BuildCursor       // exclusive; nil starts at the newest
}

// BuildPage is one page of builds, newest first.
type BuildPage struct {
	Builds []model.TemplateBuild
	Next   *BuildCursor // nil on the last page
}

// BuildFinish ends a leased build.
type BuildFinish struct {
	ID     model.BuildID
	Owner  model.NodeID
	State  model.BuildState // succeeded or failed
	Error  *model.BuildError
	Digest model.TemplateDigest // when succeeded
	// Template, when succeeded, is recorded (as PutTemplate does) in the
	// transaction that finishes the build and points its name at it, so
	// that no collection can take an unnamed template between the two.
	Template *model.Template
	Now      time.Time
}

// Store is Airlock's desired-state store.
type Store interface {
	Volumes
	E2BBuilds

	// Projects and API keys.
	CreateProject(ctx context.Context, p model.Project) error
	GetProject(ctx context.Context, id model.ProjectID) (model.Project, error)
	// ListProjects lists every project but model.SystemProject.
	ListProjects(ctx context.Context) ([]model.Project, error)
	CreateAPIKey(ctx context.Context, k model.APIKey, idem *IdempotencyRecord) error
	GetAPIKey(ctx context.Context, id model.APIKeyID) (model.APIKey, error)
	ListAPIKeys(ctx context.Context, project model.ProjectID) ([]model.APIKey, error)
	// RevokeAPIKey sets revoked_at if it is not set yet; revoking twice is not an error.
	RevokeAPIKey(ctx context.Context, id model.APIKeyID, at time.Time) error
	CountAPIKeys(ctx context.Context) (int, error)
	// SetProjectQuota replaces the project's quota (unlimited limits are
	// stored as such); ErrNotFound for an unknown project. A quota below
	// the current usage is allowed: it refuses new sandboxes until enough
	// are deleted.
	SetProjectQuota(ctx context.Context, project model.ProjectID, q model.Quota) error
	// GetProjectQuota returns the project's quota and what its live
	// sandboxes (every state but deleted) hold, read together.
	GetProjectQuota(ctx context.Context, project model.ProjectID) (model.Quota, model.Usage, error)

	// Templates: tags, delete and garbage collection (templates.go).
	Templates

	// Egress policies, profiles and secrets (egress.go).
	Egress
	// Saved snapshots of running sandboxes (snapshots.go).
	Snapshots
	// Execution environments and each node's view of them (environments.go).
	Environments

	// Activity, deadlines and the purge of finished rows (activity.go).
	Activity
	// Sandboxes' resource use over time (metrics.go).
	Metrics

	// Warm pools and their claims (pools.go).
	Pools
	// Counts (metrics): live sandboxes by state, runtime and pool.
	Counts

	// When the next operation becomes claimable (due.go).
	Due

	// Nodes, their heartbeats, fencing and loss (nodes.go).
	Nodes
	AttachKeys // attachment-key public keys of every process (attachkeys.go)
	Audit      // the audit log of mutating requests (audit.go)

	// Sandboxes.
	// CreateSandbox inserts the sandbox (state pending) and its create
	// operation, plus the idempotency record if given, in one transaction.
	// In the same transaction it checks the project's quota against its
	// live sandboxes and refuses with a *model.QuotaExceededError (errors.Is
	// model.ErrQuotaExceeded) a sandbox that would exceed it: of several
	// concurrent creates, no more succeed than the quota admits. A
	// conflicting idempotency record is reported before the quota.
	// The sandbox's egress policy (egress, possibly empty) is stored with
	// it; a profile it names that does not exist is an error wrapping
	// policy.ErrUnknownProfile (and nothing is written), and the profiles it
	// names cannot be deleted until the sandbox is.
	// The volumes it mounts (sb.VolumeMounts) must be the project's
	// (ErrVolumeNotFound) and live on its node, or on none yet, which
	// binds them to its node (ErrVolumeElsewhere); a sandbox not placed
	// yet cannot mount volumes.
	CreateSandbox(ctx context.Context, sb model.Sandbox, egress policy.Spec, op model.Operation, idem *IdempotencyRecord) error
	// CreateSandboxes is CreateSandbox of several sandboxes (each with its
	// operation, ops[i] of sbs[i]) with one egress policy, in one
	// transaction: the quota admits all of them or none. A sandbox with
	// FromSnapshot needs that snapshot ready (else ErrSnapshotNotReady,
	// or ErrNotFound for another project's or a missing one).
	CreateSandboxes(ctx context.Context, sbs []model.Sandbox, egress policy.Spec, ops []model.Operation, idem *IdempotencyRecord) error
	// GetSandbox returns a sandbox of the given project (ErrNotFound for another project's).
	GetSandbox(ctx context.Context, project model.ProjectID, id model.SandboxID) (model.Sandbox, error)
	// GetSandboxByID is for the control loops and the data plane, which are not project-scoped.
	GetSandboxByID(ctx context.Context, id model.SandboxID) (model.Sandbox, error)
	ListSandboxes(ctx context.Context, q SandboxQuery) (SandboxPage, error)
	// ListSandboxesOnNode returns every sandbox placed on the node that is not deleted.
	ListSandboxesOnNode(ctx context.Context, node model.NodeID) ([]model.Sandbox, error)
	// RequestDelete moves the sandbox to deleting (refused with
	// model.ErrInvalidTransition when the state machine forbids it), fails
	// any still-pending operation of the sandbox with code "cancelled", and
	// inserts the delete operation and idempotency record, atomically. A
	// sandbox already deleting whose delete operation has ended (failed) gets
	// a new delete operation; while one is unfinished, a second is refused
	// with model.ErrInvalidTransition.
	RequestDelete(ctx context.Context, req DeleteRequest) (model.Sandbox, error)
	// RequestOperation starts a pause, resume, suspend or wake (see
	// OperationRequest). It is refused with model.ErrInvalidTransition when
	// the kind's lifecycle cannot start from the sandbox's state, and with
	// an error wrapping ErrBusy while another operation of the sandbox is
	// unfinished; nothing is written then.
	RequestOperation(ctx context.Context, req OperationRequest) (model.Sandbox, error)
	// TransitionSandbox is a compare-and-swap on the sandbox state that also
	// checks the state machine.
	TransitionSandbox(ctx context.Context, id model.SandboxID, from, to model.SandboxState, reason string, now time.Time) error

	// Operations.
	GetOperation(ctx context.Context, project model.ProjectID, id model.OperationID) (model.Operation, error)
	// ListOperations returns a page of a project's operations, newest
	// (created_at, id) first (see OperationQuery).
	ListOperations(ctx context.Context, q OperationQuery) (OperationPage, error)
	// ClaimOperation takes the oldest unfinished operation whose lease is free
	// or expired and whose NotBefore is not after c.Now, that is not preceded
	// by another unfinished operation of the same sandbox, and whose sandbox
	// is unplaced or placed on c.Owner. It marks it running, increments
	// Attempts and leases it to c.Owner. Returns ErrNoWork when there is none.
	ClaimOperation(ctx context.Context, c Claim) (model.Operation, error)
	// RenewLease extends the lease; ErrLeaseLost if another owner took it or it finished.
	RenewLease(ctx context.Context, id model.OperationID, c Claim) error
	// RetryOperation schedules a leased operation's next attempt (see Retry);
	// ErrLeaseLost if r.Owner does not hold it, ErrNotFound if it does not
	// exist.
	RetryOperation(ctx context.Context, r Retry) error
	// FinishOperation ends a leased operation (see Finish).
	FinishOperation(ctx context.Context, f Finish) error
	// ReleaseLeases makes every unfinished operation leased to owner claimable
	// again at once (lease expiry set to the past) and returns how many. A
	// server calls it at start-up, when it holds its data dir's lock and so
	// knows that leases in its name belong to a previous, crashed incarnation.
	ReleaseLeases(ctx context.Context, owner model.NodeID, now time.Time) (int, error)
	// ListUnfinishedOperations returns pending and running operations (oldest first).
	ListUnfinishedOperations(ctx context.Context) ([]model.Operation, error)

	// Command sessions.
	CreateCommandSession(ctx context.Context, cs model.CommandSession, idem *IdempotencyRecord) error
	GetCommandSessionByProcess(ctx context.Context, id model.ProcessID) (model.CommandSession, error)
	// GetAttachTarget is GetCommandSessionByProcess plus the current state of
	// the session's sandbox, in one read (the data plane asks on every attach).
	GetAttachTarget(ctx context.Context, id model.ProcessID) (model.CommandSession, model.SandboxState, error)
	// MarkCommandSessionAttached sets attached_at if unset and reports whether this call set it.
	MarkCommandSessionAttached(ctx context.Context, id model.CommandSessionID, at time.Time) (first bool, err error)

	// Idempotency.
	GetIdempotency(ctx context.Context, project model.ProjectID, keyHash []byte) (IdempotencyRecord, error)
	// PutIdempotency inserts a record on its own, for the mutations whose store
	// call takes none (project creation, key revocation, template import). It
	// returns *IdempotencyConflictError (with the stored record) if one with the
	// same (project, key hash) exists.
	PutIdempotency(ctx context.Context, rec IdempotencyRecord) error
	DeleteIdempotencyBefore(ctx context.Context, before time.Time) (int, error)

	// Template builds (see BuildQuery, BuildFinish). Every write wakes
	// watchers, so a follower of a build's progress needs no polling.
	// CreateBuild inserts a pending build and the idempotency record if given.
	CreateBuild(ctx context.Context, b model.TemplateBuild, idem *IdempotencyRecord) error
	GetBuild(ctx context.Context, id model.BuildID) (model.TemplateBuild, error)
	// ListBuilds returns builds newest first, (created_at, id) descending.
	ListBuilds(ctx context.Context, q BuildQuery) (BuildPage, error)
	// ClaimBuild takes the oldest unfinished build whose lease is free or
	// expired, marks it running, increments Attempts and leases it to
	// c.Owner. Returns ErrNoWork when there is none.
	ClaimBuild(ctx context.Context, c Claim) (model.TemplateBuild, error)
	// BuildClaimable reports whether ClaimBuild at now would find a build:
	// one read without locks or writes, so that a runner asks it before it
	// claims (a claim is a write transaction). A concurrent claim may take
	// the build first; ClaimBuild then reports ErrNoWork.
	BuildClaimable(ctx context.Context, now time.Time) (bool, error)
	// RenewBuildLease extends the lease; ErrLeaseLost if another owner took
	// it or it finished.
	RenewBuildLease(ctx context.Context, id model.BuildID, c Claim) error
	// SetBuildProgress records the steps of a running build leased to owner
	// (ErrLeaseLost otherwise).
	SetBuildProgress(ctx context.Context, id model.BuildID, owner model.NodeID, done, cached, total int, now time.Time) error
	// FinishBuild ends a build leased to f.Owner (ErrLeaseLost otherwise)
	// and, when it succeeded with a name, points the name at the digest
	// (which must be a stored template) in the same transaction.
	FinishBuild(ctx context.Context, f BuildFinish) error
	// ReleaseBuildLeases makes every unfinished build leased to owner
	// claimable at once (see ReleaseLeases) and returns how many.
	ReleaseBuildLeases(ctx context.Context, owner model.NodeID, now time.Time) (int, error)

	// Watch returns a channel that receives a value (coalesced) after any
	// operation, sandbox, node, pool or template build row changes, from
	// this process or, for PostgreSQL, any process sharing the database.
	// It is closed when ctx ends. It is the coarse watch, of every change
	// anywhere: the API's watches (the console's live lists, a follower of
	// an operation or a build) use it. They need less: the changes of one
	// project's sandboxes and operations (a list, an operation) or of one
	// build; a watch by project would let them sleep through the others'.
	Watch(ctx context.Context) <-chan struct{}
	// WatchNode is Watch for one node's operation loop: it wakes after a
	// change of an operation or sandbox placed on node (or of the node's
	// own row), and after cluster-wide changes (nodes declared dead, pools
	// set), not after changes that concern only other nodes or no node
	// (an unplaced sandbox, a build). A change that could make an
	// operation claimable by node wakes it; what only time makes
	// claimable (a lease or not_before running out) does not (see Due).
	// Like Watch, it may be woken by changes it did not need, and a
	// notification can be lost (a PostgreSQL listener that reconnects
	// wakes every watcher, but one whose wake-up raced the loss sleeps
	// on): its users poll on a timer too.
	WatchNode(ctx context.Context, node model.NodeID) <-chan struct{}
	// WatchBuilds is Watch for the build runners: it wakes after a template
	// build row changes (a build queued, claimed, advanced, finished or
	// released) and after cluster-wide changes; not after an expired
	// lease, which only time makes claimable.
	WatchBuilds(ctx context.Context) <-chan struct{}

	Close() error
}
