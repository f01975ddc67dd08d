package api

import (
	"context"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// handlerStores is the store as the handler groups below use it, each
// declared here, where it is consumed, as the methods it calls; New sets
// them all from Config.Store. A group that has one reaches the store only
// through it (TestHandlerGroupsUseTheirStores).
type handlerStores struct {
	sandboxes   sandboxStore
	pools       poolStore
	idempotency idempotencyStore
}

// sandboxStore is what the sandbox routes read and write themselves
// (sandboxes.go; processes.go, files.go and the other routes on one
// sandbox through sandboxOf). Creates, deletes and lifecycle changes go
// through Config.Sandboxes.
type sandboxStore interface {
	GetSandbox(ctx context.Context, project model.ProjectID, id model.SandboxID) (model.Sandbox, error)
	ListSandboxes(ctx context.Context, q store.SandboxQuery) (store.SandboxPage, error)
	GetSandboxEgress(ctx context.Context, project model.ProjectID, id model.SandboxID) (policy.Spec, error)
	CreateCommandSession(ctx context.Context, cs model.CommandSession, idem *store.IdempotencyRecord) error
	ListSandboxMetrics(ctx context.Context, q store.MetricsQuery) ([]model.SandboxMetric, error)
}

// poolStore is what the pool routes read and delete themselves (pools.go);
// setting a pool goes through Config.Sandboxes.
type poolStore interface {
	ListPools(ctx context.Context) ([]model.Pool, error)
	CountPoolSandboxes(ctx context.Context) ([]store.PoolSandboxCount, error)
	DeletePool(ctx context.Context, id model.PoolID) (model.Pool, error)
}

// idempotencyStore keeps the answers of mutating routes made with an
// Idempotency-Key (idempotency.go, mutation.go); most mutations hand their
// record to the store call that makes the change instead.
type idempotencyStore interface {
	GetIdempotency(ctx context.Context, project model.ProjectID, keyHash []byte) (store.IdempotencyRecord, error)
	PutIdempotency(ctx context.Context, rec store.IdempotencyRecord) error
}

func newHandlerStores(st store.Store) handlerStores {
	return handlerStores{sandboxes: st, pools: st, idempotency: st}
}
