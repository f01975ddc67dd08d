package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/envid"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
)

// Placer chooses a new sandbox's node (*placement.Placer).
type Placer interface {
	Place(ctx context.Context, req placement.Request) (placement.Decision, error)
}

// placeAttempts bounds how often a create is placed again after the store
// refused a node that filled up between the decision and the insert.
const placeAttempts = 3

// environmentSelector is the create's environment as asked (a name or a
// reference), or the server's default.
func (a *API) environmentSelector(given bool, s string) (envid.Selector, error) {
	if given && a.cfg.Environments == nil {
		return envid.Selector{}, errorf(http.StatusNotImplemented, apiv1.CodeNotSupported, "this server cannot choose an execution environment")
	}
	if given {
		sel, err := envid.ParseSelector(s)
		if err != nil {
			return envid.Selector{}, errorf(http.StatusBadRequest, apiv1.CodeEnvironmentUnknown, "environment: %s", err.Error())
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
	for range placeAttempts {
		d, err := a.cfg.Placer.Place(ctx, req)
		if err != nil {
			return a.placementError(ctx, sel, err)
		}
		if d.Node == a.cfg.Self && a.cfg.Environments != nil {
			// This node: its artifacts are checked now (a runtime binary
			// replaced since the start is refused here, not at create).
			if _, err := a.createEnvironment(ctx, true, string(d.Environment)); err != nil {
				return err
			}
		}
		sb.NodeID, sb.Environment = d.Node, d.Environment
		err = insert(*sb)
		if !errors.Is(err, store.ErrNodeFull) {
			return err
		}
		req.Exclude = append(req.Exclude, d.Node)
	}
	return errorf(http.StatusServiceUnavailable, apiv1.CodeNoCapacity, "nodes filled up while the sandbox was being placed; retry")
}

// placementError maps a placement failure. When no node can run the
// sandbox and this process runs sandboxes itself, its own environment
// check says more precisely why (not enabled, artifacts missing).
func (a *API) placementError(ctx context.Context, sel envid.Selector, err error) error {
	switch {
	case errors.Is(err, placement.ErrUnknownEnvironment):
		if a.cfg.Environments != nil {
			if _, lerr := a.createEnvironment(ctx, true, selectorString(sel)); lerr != nil {
				return lerr
			}
		}
		return errorf(http.StatusBadRequest, apiv1.CodeEnvironmentUnknown, "%s", err.Error())
	case errors.Is(err, placement.ErrNoNode):
		if a.cfg.Environments != nil && a.cfg.Self != "" {
			if _, lerr := a.createEnvironment(ctx, true, selectorString(sel)); lerr != nil {
				return lerr
			}
		}
		return errorf(http.StatusConflict, apiv1.CodeNoEligibleNode, "%s", err.Error())
	case errors.Is(err, placement.ErrNoRoom):
		return errorf(http.StatusServiceUnavailable, apiv1.CodeNoCapacity, "%s", err.Error())
	}
	return fmt.Errorf("place sandbox: %w", err)
}

func selectorString(sel envid.Selector) string {
	if sel.Ref != "" {
		return string(sel.Ref)
	}
	return string(sel.Name)
}
