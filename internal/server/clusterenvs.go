package server

import (
	"context"
	"fmt"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/environment/registry"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
)

// environments is what the API lists (api.Environments) and what the
// sandboxes service resolves creates with (sandboxes.Environments): this
// node's *registry.Registry or an api replica's clusterEnvironments.
type environments interface {
	api.Environments
	sandboxes.Environments
}

// clusterEnvironments is an api replica's view of the execution
// environments: it runs none itself, so it lists what the nodes recorded
// and leaves the choice of a node, and so of a reference, to placement.
type clusterEnvironments struct {
	st  store.Store
	def environment.Name
}

func (c clusterEnvironments) Default() environment.Name { return c.def }

// List returns every readable definition; one is enabled and available
// when some node has it enabled and working (its reason otherwise says
// what the nodes reported).
func (c clusterEnvironments) List(ctx context.Context) ([]registry.Status, error) {
	recs, err := c.st.ListEnvironments(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.st.ListNodeEnvironments(ctx, store.NodeEnvironmentQuery{})
	if err != nil {
		return nil, err
	}
	out := make([]registry.Status, 0, len(recs))
	for _, rec := range recs {
		d, err := environment.Parse(rec.Definition)
		if err != nil {
			continue
		}
		st := registry.Status{Ref: rec.Ref, Definition: d, Default: rec.Name == c.def, Reason: "no node has it enabled"}
		for _, r := range rows {
			if r.Ref != rec.Ref || !r.Enabled {
				continue
			}
			st.Enabled = true
			if r.Available {
				st.Available, st.Reason = true, ""
			}
			if r.CheckedAt.After(st.CheckedAt) {
				st.CheckedAt = r.CheckedAt
			}
		}
		if st.Enabled && !st.Available {
			st.Reason = "no node where it is enabled could run it"
		}
		out = append(out, st)
	}
	return out, nil
}

// Resolve refuses only what no node knows; which node may run it is
// placement's answer.
func (c clusterEnvironments) Resolve(ctx context.Context, sel environment.Selector) (model.EnvironmentRef, error) {
	recs, err := c.st.ListEnvironments(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range recs {
		if r.Ref == sel.Ref || (sel.Ref == "" && r.Name == sel.Name) {
			return r.Ref, nil
		}
	}
	return "", fmt.Errorf("%w: no node has recorded the environment %s", environment.ErrUnknown, sel)
}
