package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// PoolClaim asks for one ready, unclaimed sandbox of a pool. A sandbox is
// ready when it runs (its create finished: the guest agent answered) and
// no delete has started.
type PoolClaim struct {
	Pool        model.PoolID
	Template    model.TemplateDigest
	Environment model.EnvironmentRef
	Resources   model.Resources // cpus, memory and disk must all match
	Node        model.NodeID    // the node whose sandboxes may be claimed
	// What the claimed sandbox becomes: the claiming project's, with
	// these settings.
	ProjectID    model.ProjectID
	Env          model.Env
	Metadata     model.Metadata
	PublicPorts  bool
	Timeouts     model.Timeouts
	NodeSelector model.NodeLabels
	Egress       policy.Spec
	// Operation is the create's operation record, stored as succeeded
	// with source pool (its SandboxID is filled in by the claim).
	Operation model.Operation
	// Idempotency, if set, makes the idempotency record of the response,
	// which names the sandbox claimed: it is called in the transaction,
	// with the sandbox and operation as they are stored.
	Idempotency func(model.Sandbox, model.Operation) (*IdempotencyRecord, error)
	Now         time.Time
}

// PoolSandbox is an unclaimed sandbox of a pool (any state but deleted).
type PoolSandbox struct {
	Pool    model.PoolID
	Sandbox model.Sandbox
}

// PoolSandboxCount is how many unclaimed sandboxes of a pool run one
// template digest in one state (N > 0).
type PoolSandboxCount struct {
	Pool     model.PoolID
	Template model.TemplateDigest
	State    model.SandboxState
	N        int
}

// Pools are the warm pools.
type Pools interface {
	// PutPool inserts p or, when a pool of the same key exists, sets its
	// size; it returns the stored pool. p.ID is used for a new pool only.
	PutPool(ctx context.Context, p model.Pool) (model.Pool, error)
	GetPool(ctx context.Context, id model.PoolID) (model.Pool, error)
	// FindPool returns the pool of key (ErrNotFound: none).
	FindPool(ctx context.Context, key model.PoolKey) (model.Pool, error)
	ListPools(ctx context.Context) ([]model.Pool, error)
	// DeletePool removes the pool's row and returns it. Its unclaimed
	// sandboxes are left to the pool controller, which deletes sandboxes
	// of pools that no longer exist.
	DeletePool(ctx context.Context, id model.PoolID) (model.Pool, error)
	// SetPoolRelease records that the pool's template now resolves to
	// digest: it becomes the current release and the current one the
	// previous (a digest already current changes nothing).
	SetPoolRelease(ctx context.Context, id model.PoolID, digest model.TemplateDigest, now time.Time) (model.Pool, error)
	// ListPoolSandboxes returns the unclaimed sandboxes of every pool
	// placed on node ("" : on every node), oldest first.
	ListPoolSandboxes(ctx context.Context, node model.NodeID) ([]PoolSandbox, error)
	// CountPoolSandboxes counts the unclaimed sandboxes (any state but
	// deleted) of every pool by template digest and state, in one query,
	// ordered by pool, digest and state.
	CountPoolSandboxes(ctx context.Context) ([]PoolSandboxCount, error)
	// ClaimPoolSandbox moves one ready sandbox matching c from the pool to
	// c.ProjectID, atomically: no two claims get the same sandbox. It
	// checks the project's quota and records the sandbox's egress policy,
	// metadata, operation and idempotency record in the same transaction,
	// and counts a hit. With no ready sandbox it returns ErrNoWork and
	// writes nothing (the caller creates cold and calls NotePoolMiss).
	// Errors are CreateSandbox's.
	ClaimPoolSandbox(ctx context.Context, c PoolClaim) (model.Sandbox, error)
	// NotePoolMiss counts a create that matched the pool but found it
	// empty; it also marks the pool used.
	NotePoolMiss(ctx context.Context, id model.PoolID, now time.Time) error
}
