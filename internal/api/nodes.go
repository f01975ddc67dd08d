package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// nodeOut is a node as the API shows it.
func nodeOut(n model.NodeStatus) apiv1.Node {
	labels := map[string]string{}
	maps.Copy(labels, n.Labels)
	return apiv1.Node{
		ID:             n.ID.String(),
		Incarnation:    n.Incarnation.String(),
		Role:           string(n.Role),
		AdvertiseURL:   n.AdvertiseURL,
		State:          string(n.State),
		StateReason:    n.StateReason,
		Labels:         labels,
		Capacity:       apiv1.NodeCapacity{Slots: n.Slots, CPUs: n.CPUs, MemoryMiB: n.MemoryMiB, Pids: n.PidsBudget},
		Usage:          apiv1.NodeUsage{Sandboxes: n.Usage.Sandboxes, CPUs: n.Usage.CPUs, MemoryMiB: n.Usage.MemoryMiB, Pids: n.Usage.Pids},
		CanPull:        n.CanPull,
		StartedAt:      n.StartedAt.UTC(),
		HeartbeatAt:    n.HeartbeatAt.UTC(),
		HeartbeatAgeMS: n.HeartbeatAge.Milliseconds(),
		Drained:        n.Drained(),
	}
}

func nodeNotFound(id model.NodeID) *apiError {
	return errorf(apiv1.CodeNodeNotFound, "node %s not found", id)
}

// listNodes: GET /v1/admin/nodes → 200 NodeList, in ID order.
func (a *API) listNodes(w http.ResponseWriter, r *http.Request, _ principal) {
	if len(r.URL.Query()) > 0 {
		a.writeError(w, r, badRequest("GET /v1/admin/nodes takes no query parameters"))
		return
	}
	ns, err := a.cfg.Store.ListNodes(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list nodes: %w", err))
		return
	}
	out := apiv1.NodeList{Nodes: make([]apiv1.Node, 0, len(ns))}
	for _, n := range ns {
		out.Nodes = append(out.Nodes, nodeOut(n))
	}
	writeJSON(w, http.StatusOK, out)
}

// getNode: GET /v1/admin/nodes/{id} → 200 Node.
func (a *API) getNode(w http.ResponseWriter, r *http.Request, _ principal) {
	id, err := model.ParseNodeID(r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	n, err := a.cfg.Store.GetNode(r.Context(), id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = nodeNotFound(id)
		}
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, nodeOut(n))
}

// setNodeState returns the handler of POST /v1/admin/nodes/{id}/{verb} →
// 200 Node: cordon (cordoned), uncordon (active) or drain (draining). The
// change is idempotent by nature (setting the state a node is in changes
// nothing), so the idempotency record is stored after it. A dead node is
// refused with 409 invalid_transition: it becomes active when it starts
// again.
func (a *API) setNodeState(verb string, state model.NodeState) func(ctx context.Context, c *call[noBody]) (*reply, error) {
	return func(ctx context.Context, c *call[noBody]) (*reply, error) {
		id, err := model.ParseNodeID(c.r.PathValue("id"))
		if err != nil {
			return nil, err
		}
		n, err := a.cfg.Store.SetNodeState(ctx, id, state)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, nodeNotFound(id)
		case errors.Is(err, model.ErrInvalidTransition):
			return nil, errorf(apiv1.CodeInvalidTransition,
				"node %s is dead and cannot be %s; it becomes active when it starts again (a new incarnation)", id, verbPast(verb))
		case err != nil:
			return nil, fmt.Errorf("%s node %s: %w", verb, id, err)
		}
		a.log.InfoContext(ctx, "node state set", "node", id, "state", state, "by", c.p.keyID)
		rep, rec, err := c.reply(http.StatusOK, nodeOut(n))
		if err != nil {
			return nil, err
		}
		if err := a.putIdempotency(ctx, rec); err != nil {
			return nil, err
		}
		return rep, nil
	}
}

// verbPast is the past participle of a node verb, for messages.
func verbPast(verb string) string {
	switch verb {
	case "cordon", "uncordon":
		return verb + "ed"
	case "drain":
		return "drained"
	}
	return verb
}
