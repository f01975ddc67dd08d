package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
)

// TestNodePidsBudget: the host's process table is a node's room, on runc
// and runsc. A server whose --pids-budget holds two sandboxes of 32 MiB
// (each may hold runc 128 + 64 = 192, runsc 4×128 + 256 = 768 host tasks,
// its host cgroup's pids.max) admits two; a third is refused with 503
// no_capacity naming the pids numbers, one of 256 MiB (runc 1088, runsc
// 4352: more than the whole budget) with 400 exceeds_node_capacity, and
// neither refusal leaves anything; GET /v1/admin/nodes and `airlock admin
// node list` show the budget and its use; a deleted sandbox gives its
// share back.
func TestNodePidsBudget(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []environment.Name{environment.NameRunc, environment.NameRunsc} {
		t.Run(string(rt), func(t *testing.T) {
			airtest.RequireBinary(t, string(rt))
			testNodePidsBudget(t, bins, rt)
		})
	}
}

// testNodePidsBudget fills a node of rt whose budget holds two sandboxes
// of 32 MiB.
func testNodePidsBudget(t *testing.T, bins binaries, rt environment.Name) {
	charge := environment.HostPids(rt, model.GuestPids(32)) // runc 192, runsc 768
	big := environment.HostPids(rt, model.GuestPids(256))   // runc 1088, runsc 4352
	budget := 2*charge + 16
	s := newServer(t, bins, serverConfig{runtime: string(rt), extraArgs: []string{"--pids-budget", strconv.Itoa(budget)}})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	// The refusals are answered at once, not retried.
	once, err := client.New(s.url, s.key, append(s.clientOptions(), client.WithRetries(0, 0))...)
	if err != nil {
		t.Fatal(err)
	}
	small := apiv1.CreateSandboxRequest{Template: "minimal", MemoryMiB: 32}
	a := createSandbox(ctx, t, c, small)
	b := createSandbox(ctx, t, c, small)
	// What admission charges is what the host lets each sandbox hold.
	for _, sb := range []apiv1.Sandbox{a, b} {
		if got := hostPidsMax(t, model.SandboxID(sb.ID)); got != strconv.Itoa(charge) {
			t.Errorf("sandbox %s: host pids.max %q, want %d (its charge)", sb.ID, got, charge)
		}
	}
	wantUsage := func(pids, sandboxes int) {
		t.Helper()
		l, err := c.ListNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Nodes) != 1 || l.Nodes[0].Capacity.Pids != budget || l.Nodes[0].Usage.Pids != pids || l.Nodes[0].Usage.Sandboxes != sandboxes {
			t.Fatalf("GET /v1/admin/nodes: %+v; want pids %d of %d in %d sandboxes", l.Nodes, pids, budget, sandboxes)
		}
	}
	wantUsage(2*charge, 2)
	stdout, stderr, code := s.cli(ctx, "admin", "node", "list")
	if code != 0 || !strings.Contains(squash(stdout), fmt.Sprintf(" %d/%d ", 2*charge, budget)) {
		t.Fatalf("airlock admin node list: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// Full now: 2·charge + charge > budget.
	_, err = once.CreateSandbox(ctx, small)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.Code != apiv1.CodeNoCapacity ||
		!strings.Contains(apiErr.Message, fmt.Sprintf("pids %d + %d of %d", 2*charge, charge, budget)) || apiErr.RetryAfter != time.Second {
		t.Fatalf("a third sandbox: %v (%+v); want 503 no_capacity with the pids numbers and Retry-After 1", err, apiErr)
	}
	// Never: more than the whole budget.
	_, err = once.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: "minimal", MemoryMiB: 256})
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != apiv1.CodeExceedsCapacity ||
		!strings.Contains(apiErr.Message, fmt.Sprintf("%d host tasks", big)) || !strings.Contains(apiErr.Message, fmt.Sprintf("pids budget is %d", budget)) {
		t.Fatalf("a sandbox above the budget: %v; want 400 exceeds_node_capacity with the pids numbers", err)
	}
	// The refusals left nothing.
	list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
	if err != nil || len(list.Sandboxes) != 2 {
		t.Fatalf("sandboxes after the refusals: %d (%v), want 2", len(list.Sandboxes), err)
	}
	wantUsage(2*charge, 2)

	// A deleted sandbox gives its share back.
	if _, err := c.DeleteSandbox(ctx, model.SandboxID(a.ID)); err != nil {
		t.Fatal(err)
	}
	waitDeleted(ctx, t, c, model.SandboxID(a.ID))
	wantUsage(charge, 1)
	createSandbox(ctx, t, c, small)
	wantUsage(2*charge, 2)
}

// hostPidsMax reads the pids.max of a sandbox's host cgroup (cgroup v1's
// pids hierarchy, or v2).
func hostPidsMax(t *testing.T, id model.SandboxID) string {
	t.Helper()
	for _, cg := range sandboxCgroups([]model.SandboxID{id}) {
		b, err := os.ReadFile(filepath.Join(cg, "pids.max"))
		if err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no pids.max for sandbox %s in %v", id, sandboxCgroups([]model.SandboxID{id}))
	return ""
}
