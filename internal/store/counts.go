package store

import (
	"context"

	"github.com/airlockdev/airlock/internal/model"
)

// SandboxCount is how many live sandboxes share a state, a runtime (the
// execution environment's name; "" before placement) and a pool ("": not
// an unclaimed pool sandbox).
type SandboxCount struct {
	State   model.SandboxState
	Runtime string
	Pool    model.PoolID
	N       int
}

// Counts are aggregate counts for metrics.
type Counts interface {
	// CountSandboxes counts the sandboxes of every node that are not
	// deleted, grouped by state, runtime and pool, in one read.
	CountSandboxes(ctx context.Context) ([]SandboxCount, error)
}
