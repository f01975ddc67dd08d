// Package sandboxes is the service layer between the management API and
// the store for what changes a sandbox's life: creating one (placed on a
// node, or claimed from a warm pool of this node), deleting one, its
// lifecycle operations (pause, resume, suspend, wake, and resuming one
// first for a request that needs it running), and the warm pools a create
// may claim from.
//
// Its methods take a context and parsed domain values (internal/model) and
// return domain values. A refusal is an *Error (its Kind says which), a
// model.ErrInvalid, a *model.QuotaExceededError, a
// *store.IdempotencyConflictError or, for a sandbox that does not run, a
// *guestops.Error; anything else is a failure of the server. It knows
// nothing of HTTP: the API decodes, authorizes and encodes, and gives each
// change a function that builds the idempotency record the store writes
// in the change's own transaction.
package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
)

// DefaultResumeTimeout bounds how long a request that asks to resume (or
// wake) its sandbox first waits for it to run. It is well below the Go
// client's 60 s per request, so that a client sees resume_timeout rather
// than its own deadline (which it would retry).
const DefaultResumeTimeout = 45 * time.Second

// MaxBuildWait bounds how long a create waits for the build that is to
// give its template name a template.
const MaxBuildWait = 15 * time.Minute

// Store is what the service reads and writes of the desired state (a
// store.Store has it all).
type Store interface {
	store.EgressProfiles // compiling a create's egress policy
	GetSandboxEgressByID(ctx context.Context, id model.SandboxID) (policy.Spec, error)

	// GetEnvironment names the environment of a create that gives a
	// reference (its host pids).
	GetEnvironment(ctx context.Context, ref model.EnvironmentRef) (store.EnvironmentRecord, error)

	ResolveTemplate(ctx context.Context, ref model.TemplateRef) (model.Template, error)
	ListBuilds(ctx context.Context, q store.BuildQuery) (store.BuildPage, error)

	// GetVolume resolves the volumes a create mounts.
	GetVolume(ctx context.Context, project model.ProjectID, ref model.VolumeRef) (model.Volume, error)
	CreateSandbox(ctx context.Context, sb model.Sandbox, egress policy.Spec, op model.Operation, idem *store.IdempotencyRecord) error
	CreateSandboxes(ctx context.Context, sbs []model.Sandbox, egress policy.Spec, ops []model.Operation, idem *store.IdempotencyRecord) error
	store.Snapshots
	GetSandbox(ctx context.Context, project model.ProjectID, id model.SandboxID) (model.Sandbox, error)
	RequestDelete(ctx context.Context, req store.DeleteRequest) (model.Sandbox, error)
	RequestOperation(ctx context.Context, req store.OperationRequest) (model.Sandbox, error)
	GetOperation(ctx context.Context, project model.ProjectID, id model.OperationID) (model.Operation, error)
	ListUnfinishedOperations(ctx context.Context) ([]model.Operation, error)

	PutPool(ctx context.Context, p model.Pool) (model.Pool, error)
	FindPool(ctx context.Context, key model.PoolKey) (model.Pool, error)
	ListPools(ctx context.Context) ([]model.Pool, error)
	ClaimPoolSandbox(ctx context.Context, c store.PoolClaim) (model.Sandbox, error)
	NotePoolMiss(ctx context.Context, id model.PoolID, now time.Time) error

	// Watch wakes waiters (a template's build, RunFirst) on changes.
	Watch(ctx context.Context) <-chan struct{}
}

// Config configures the service.
type Config struct {
	Store  Store
	Logger *slog.Logger     // nil: slog.Default()
	Now    func() time.Time // nil: time.Now

	// Environments resolves a create's execution environment; nil:
	// sandboxes record none (the worker's own runtime), and naming one is
	// refused.
	Environments Environments
	// Placer chooses the node of each new sandbox (a decision for Self is
	// checked against this node's environments, Environments.Resolve).
	// Nil: sandboxes are stored without a node and the environment is
	// resolved here (tests).
	Placer placement.Decider
	// Self is this process's node (required with Placer, and for claims).
	Self model.NodeID
	// ClaimPools makes a create whose template, environment and resources
	// match a warm pool claim one of the pool's ready sandboxes on this
	// node (Self) instead of starting cold; false: pools are managed here
	// but claimed elsewhere (an api replica).
	ClaimPools bool
	// DefaultDiskMiB is the writable layer of a sandbox (and of a pool's
	// sandboxes) whose request names no disk_mib (DefaultResources); 0:
	// model.DefaultDiskMiB.
	DefaultDiskMiB int
	// Capacity bounds what one sandbox may ask for (nil: only the model's
	// fixed bounds); its DiskMiB is the server's --max-disk-mib.
	Capacity *model.NodeCapacity
	// LifecycleSupport says what the runtime hosting a sandbox can do, so
	// that a pause, resume, suspend or wake it cannot do is refused
	// (NotSupported); ok false: not known here (the operation is queued
	// and fails with the worker's error). Nil: nothing is checked here.
	LifecycleSupport func(sb model.Sandbox) (sup LifecycleSupport, ok bool)
	// ResumeTimeout bounds RunFirst; 0 (or negative): DefaultResumeTimeout.
	ResumeTimeout time.Duration

	// Egress is the live egress state of the sandboxes hosted here (the
	// server's *egress.Registry): a sandbox claimed from a pool gets the
	// create's policy applied at once. Nil: none is hosted here.
	Egress LiveEgress
	// EgressDefault is the server's --egress-default, for policies that
	// name none; "": policy.Public.
	EgressDefault policy.Default

	// Metrics counts pool claims as finished creates; nil: none.
	Metrics *metrics.Metrics
}

// Environments is this server's registry of execution environments
// (*registry.Registry), as far as creates ask it.
type Environments interface {
	// Resolve returns the reference of the environment sel names if a new
	// sandbox may run in it here; errors wrap environment.ErrUnknown,
	// environment.ErrArtifactsMissing or environment.ErrUnavailable.
	Resolve(ctx context.Context, sel environment.Selector) (model.EnvironmentRef, error)
	// Default is the environment of a create that names none.
	Default() environment.Name
}

// LiveEgress finds the live egress state of a sandbox hosted here.
type LiveEgress interface {
	ByID(id model.SandboxID) (*egress.Sandbox, bool)
}

// LifecycleSupport is what the runtime hosting a sandbox can do beyond
// create and delete.
type LifecycleSupport struct {
	// Pause: pause and resume (memory stays resident).
	Pause bool
	// Suspends are the kinds of snapshot a suspend can be asked to write,
	// the runtime's own first (runtime.SuspendKinds of its capabilities);
	// none: it cannot suspend (nor wake).
	Suspends []model.SnapshotKind
	// LiveSnapshot: a snapshot of the running sandbox that leaves it
	// running (the snapshot noun, forks); its kind is Snapshot's.
	LiveSnapshot bool
}

// Snapshot is the kind of snapshot a suspend writes unless asked for
// another; "": the runtime cannot suspend.
func (l LifecycleSupport) Snapshot() model.SnapshotKind {
	if len(l.Suspends) == 0 {
		return ""
	}
	return l.Suspends[0]
}

// CanSuspendAs says whether a suspend may be asked to write kind ("": the
// runtime's own, if it can suspend at all).
func (l LifecycleSupport) CanSuspendAs(kind model.SnapshotKind) bool {
	if kind == "" {
		return len(l.Suspends) > 0
	}
	return slices.Contains(l.Suspends, kind)
}

// Service creates, deletes and changes the lifecycle of sandboxes.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("sandboxes: Config.Store is required")
	}
	if cfg.Placer != nil && cfg.Self == "" {
		return nil, errors.New("sandboxes: Config.Self is required with Placer")
	}
	if cfg.DefaultDiskMiB == 0 {
		cfg.DefaultDiskMiB = model.DefaultDiskMiB
	}
	if d := cfg.DefaultDiskMiB; d < model.MinDiskMiB || d > model.MaxDiskMiB ||
		cfg.Capacity != nil && cfg.Capacity.DiskMiB > 0 && d > cfg.Capacity.DiskMiB {
		return nil, fmt.Errorf("sandboxes: DefaultDiskMiB %d must be between %d and %d and at most Capacity.DiskMiB", d, model.MinDiskMiB, model.MaxDiskMiB)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, log: cfg.Logger}, nil
}

// now is the time of a change the service makes on its own (the API gives
// each request's): UTC, at the store's precision.
func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Microsecond) }

// DefaultResources are the resources of a sandbox whose request names
// none: the model's defaults with Config.DefaultDiskMiB.
func (s *Service) DefaultResources() model.Resources {
	res := model.DefaultResources()
	res.DiskMiB = s.cfg.DefaultDiskMiB
	return res
}

// CheckResources refuses resources out of the model's bounds
// (model.ErrInvalid) or more than one sandbox may have here
// (ExceedsCapacity).
func (s *Service) CheckResources(res model.Resources) error {
	if err := res.Validate(); err != nil {
		return err
	}
	if s.cfg.Capacity != nil {
		if err := res.FitsNode(*s.cfg.Capacity); err != nil {
			return errorf(ExceedsCapacity, "%s", err.Error())
		}
	}
	return nil
}
