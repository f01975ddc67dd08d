// Package storefeed feeds the metrics' store collector (metrics.Store) from
// the store: internal/metrics imports no store and counts in its own types.
package storefeed

import (
	"context"

	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// New returns st as a metrics.Store.
func New(st store.Store) metrics.Store { return feed{st} }

type feed struct{ st store.Store }

func (f feed) CountSandboxes(ctx context.Context) ([]metrics.SandboxCount, error) {
	counts, err := f.st.CountSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]metrics.SandboxCount, len(counts))
	for i, c := range counts {
		out[i] = metrics.SandboxCount{State: c.State, Environment: c.Runtime, Pool: c.Pool, N: c.N}
	}
	return out, nil
}

func (f feed) ListPools(ctx context.Context) ([]model.Pool, error) { return f.st.ListPools(ctx) }
