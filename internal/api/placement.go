package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/envid"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
)

// Placer chooses a new sandbox's node (*placement.Placer).
type Placer = placement.Decider

// environmentSelector is the create's environment as asked (a name or a
// reference), or the server's default.
func (a *API) environmentSelector(given bool, s string) (envid.Selector, error) {
	if given && a.cfg.Environments == nil {
		return envid.Selector{}, errorf(apiv1.CodeNotSupported, "this server cannot choose an execution environment")
	}
	if given {
		sel, err := envid.ParseSelector(s)
		if err != nil {
			return envid.Selector{}, errorf(apiv1.CodeEnvironmentUnknown, "environment: %s", err.Error())
		}
		return sel, nil
	}
	if a.cfg.Environments == nil {
		return envid.Selector{}, nil
	}
	return envid.Selector{Name: a.cfg.Environments.Default()}, nil
}

// insertPlaced places sb and inserts it with insert, placing it again
// elsewhere while the store finds the chosen node full; it sets sb's node
// and environment reference. Placement errors say what each node lacked.
func (a *API) insertPlaced(ctx context.Context, sb *model.Sandbox, sel envid.Selector, insert func(model.Sandbox) error) error {
	req := placement.Request{Environment: sel, Template: sb.Template, Resources: sb.Resources, Selector: sb.NodeSelector}
	err := placement.PlaceAndCommit(ctx, a.cfg.Placer, req, func(d placement.Decision) error {
		if d.Node == a.cfg.Self && a.cfg.Environments != nil {
			// This node: its artifacts are checked now (a runtime binary
			// replaced since the start is refused here, not at create).
			if _, err := a.createEnvironment(ctx, true, string(d.Environment)); err != nil {
				return err
			}
		}
		sb.NodeID, sb.Environment = d.Node, d.Environment
		return insert(*sb)
	})
	switch {
	case errors.Is(err, placement.ErrRefusedEverywhere):
		return errorf(apiv1.CodeNoCapacity, "nodes filled up while the sandbox was being placed; retry")
	case errors.Is(err, placement.ErrUnknownEnvironment), errors.Is(err, placement.ErrNoNode), errors.Is(err, placement.ErrNoRoom):
		return a.placementError(ctx, sel, err)
	}
	return err
}

// placementError maps a placement failure. When no node can run the
// sandbox and this process runs sandboxes itself, its own environment
// check says more precisely why (not enabled, artifacts missing).
func (a *API) placementError(ctx context.Context, sel envid.Selector, err error) error {
	switch {
	case errors.Is(err, placement.ErrUnknownEnvironment):
		if a.cfg.Environments != nil {
			if _, lerr := a.createEnvironment(ctx, true, sel.String()); lerr != nil {
				return lerr
			}
		}
		return errorf(apiv1.CodeEnvironmentUnknown, "%s", err.Error())
	case errors.Is(err, placement.ErrNoNode):
		if a.cfg.Environments != nil && a.cfg.Self != "" {
			if _, lerr := a.createEnvironment(ctx, true, sel.String()); lerr != nil {
				return lerr
			}
		}
		return errorf(apiv1.CodeNoEligibleNode, "%s", err.Error())
	case errors.Is(err, placement.ErrNoRoom):
		return errorf(apiv1.CodeNoCapacity, "%s", err.Error())
	}
	return fmt.Errorf("place sandbox: %w", err)
}
