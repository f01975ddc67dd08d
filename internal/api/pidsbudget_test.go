package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// TestPidsBudgetRefusesCreates: a node's sandboxes hold at most its pids
// budget of host tasks in all. A tenant that fills it gets no_capacity
// (503, Retry-After, the numbers in the message) for one more sandbox, one
// sandbox whose host pids alone exceed the budget gets
// exceeds_node_capacity (400), and neither refusal stores anything; GET
// /v1/admin/nodes shows the budget and what is used of it.
func TestPidsBudgetRefusesCreates(t *testing.T) {
	t.Parallel()
	// This harness names no environment: a sandbox is charged as one of
	// an environment this binary does not know, runsc's 4n+256.
	small := environment.HostPids("", model.GuestPids(32)) // 4×128+256 = 768
	big := environment.HostPids("", model.GuestPids(64))   // 4×256+256 = 1280
	if small != 768 || big != 1280 {
		t.Fatalf("charges %d and %d, want 768 and 1280", small, big)
	}
	const budget = 2000
	e := newEnv(t, func(c *envConfig) {
		// As a server of role all: one sandbox may not ask for more
		// than the node's budget.
		c.svc.Capacity = &model.NodeCapacity{Pids: budget}
	})
	ctx := context.Background()
	// The harness's node, now with a pids budget (as its server records
	// it when it starts).
	if _, err := e.st.RegisterNode(ctx, model.Node{ID: testNode, Incarnation: testIncarnation, Role: model.RoleAll,
		AdvertiseURL: "http://127.0.0.1:1", CanPull: true, PidsBudget: budget}); err != nil {
		t.Fatal(err)
	}
	create := func(mem string) *resp {
		return e.do("POST", "/v1/sandboxes", e.keyA, `{"memory_mib":`+mem+`}`)
	}
	first := e.createSandbox(e.keyA, `{"memory_mib":32}`).Sandbox
	if n := e.getNode(testNode); n.Capacity.Pids != budget || n.Usage.Pids != small || n.Usage.Sandboxes != 1 {
		t.Fatalf("node after one sandbox: capacity %+v usage %+v, want pids %d of %d", n.Capacity, n.Usage, small, budget)
	}

	// 768 + 1280 > 2000: full now.
	r := create("64").wantError(t, http.StatusServiceUnavailable, apiv1.CodeNoCapacity)
	if r.header.Get("Retry-After") == "" {
		t.Error("no_capacity without Retry-After")
	}
	if msg := errorMessage(t, r); !strings.Contains(msg, "pids 768 + 1280 of 2000") {
		t.Errorf("no_capacity message %q does not give the pids numbers", msg)
	}
	// 4×1024+256 = 4352 > 2000 whatever is used: never.
	r = create("256").wantError(t, http.StatusBadRequest, apiv1.CodeExceedsCapacity)
	if msg := errorMessage(t, r); !strings.Contains(msg, "pids") || !strings.Contains(msg, "4352") || !strings.Contains(msg, "2000") {
		t.Errorf("exceeds_node_capacity message %q does not give the pids numbers", msg)
	}
	// Nothing of the refused creates was stored.
	page, err := e.st.ListSandboxes(ctx, store.SandboxQuery{ProjectID: e.projA, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != model.SandboxID(first.ID) {
		t.Fatalf("stored after the refusals: %+v, want only %s", page.Sandboxes, first.ID)
	}
	if got := page.Sandboxes[0].Resources.HostPids; got != small {
		t.Errorf("stored host pids %d, want %d", got, small)
	}
	if n := e.getNode(testNode); n.Usage.Pids != small || n.Usage.Sandboxes != 1 {
		t.Fatalf("node usage after the refusals: %+v", n.Usage)
	}

	// What is left still fits a small one (768 + 768 ≤ 2000), then
	// nothing more.
	create("32").want(t, http.StatusAccepted)
	create("32").wantError(t, http.StatusServiceUnavailable, apiv1.CodeNoCapacity)
	var l apiv1.NodeList
	e.do("GET", "/v1/admin/nodes", e.admin, "").want(t, http.StatusOK).decode(t, &l)
	if len(l.Nodes) != 1 || l.Nodes[0].Capacity.Pids != budget || l.Nodes[0].Usage.Pids != 2*small {
		t.Fatalf("GET /v1/admin/nodes: %+v", l.Nodes)
	}
}

// errorMessage decodes an error response's message.
func errorMessage(t *testing.T, r *resp) string {
	t.Helper()
	var e apiv1.Error
	r.decode(t, &e)
	return e.Message
}
