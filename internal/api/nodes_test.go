package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
)

// registerNode records a node of role all directly in the store, as its
// server would when it starts.
func (e *testEnv) registerNode(labels model.NodeLabels) model.NodeStatus {
	e.t.Helper()
	n, err := e.st.RegisterNode(context.Background(), model.Node{
		ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll,
		AdvertiseURL: "http://10.0.0.7:7070", Slots: 10, CPUs: 8, MemoryMiB: 16384,
		Labels: labels, CanPull: true,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// placeSandbox creates a pending sandbox on node directly in the store.
func (e *testEnv) placeSandbox(node model.NodeID) model.SandboxID {
	e.t.Helper()
	now := e.clock.Now()
	sb := model.Sandbox{
		ID: model.NewSandboxID(), ProjectID: e.projA, Template: e.digest,
		Resources: model.Resources{CPUs: 2, MemoryMiB: 1024, DiskMiB: 1024},
		State:     model.StatePending, NodeID: node, CreatedAt: now, UpdatedAt: now, LastActivity: now,
	}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: e.projA, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if err := e.st.CreateSandbox(context.Background(), sb, policy.Spec{}, op, nil); err != nil {
		e.t.Fatal(err)
	}
	return sb.ID
}

func (e *testEnv) getNode(id model.NodeID) apiv1.Node {
	e.t.Helper()
	var n apiv1.Node
	e.do("GET", "/v1/admin/nodes/"+id.String(), e.admin, "").want(e.t, http.StatusOK).decode(e.t, &n)
	return n
}

func (e *testEnv) setNode(id model.NodeID, verb string) apiv1.Node {
	e.t.Helper()
	var n apiv1.Node
	e.do("POST", "/v1/admin/nodes/"+id.String()+"/"+verb, e.admin, "").want(e.t, http.StatusOK).decode(e.t, &n)
	return n
}

func TestNodesListAndGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var l apiv1.NodeList
	e.do("GET", "/v1/admin/nodes", e.admin, "").want(t, http.StatusOK).decode(t, &l)
	if len(l.Nodes) != 1 || l.Nodes[0].ID != testNode.String() {
		t.Fatalf("the harness's one node: %+v", l)
	}

	a := e.registerNode(model.NodeLabels{"zone": "a", "gpu": "none"})
	b := e.registerNode(nil)
	e.placeSandbox(a.ID)
	e.placeSandbox(a.ID)

	e.do("GET", "/v1/admin/nodes", e.admin, "").want(t, http.StatusOK).decode(t, &l)
	want := []string{a.ID.String(), b.ID.String(), testNode.String()}
	slices.Sort(want)
	var got []string
	for _, n := range l.Nodes {
		got = append(got, n.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v in ID order", got, want)
	}

	n := e.getNode(a.ID)
	if n.ID != a.ID.String() || n.Incarnation != a.Incarnation.String() || n.Role != "all" ||
		n.AdvertiseURL != "http://10.0.0.7:7070" || n.State != "active" || n.StateReason != "" ||
		n.Labels["zone"] != "a" || n.Labels["gpu"] != "none" || len(n.Labels) != 2 ||
		n.Capacity != (apiv1.NodeCapacity{Slots: 10, CPUs: 8, MemoryMiB: 16384}) ||
		n.Usage != (apiv1.NodeUsage{Sandboxes: 2, CPUs: 4, MemoryMiB: 2048}) ||
		!n.CanPull || n.Drained || n.HeartbeatAgeMS < 0 || n.HeartbeatAgeMS > time.Minute.Milliseconds() {
		t.Fatalf("node %+v", n)
	}
	if n.StartedAt.IsZero() || n.HeartbeatAt.Before(n.StartedAt) || n.StartedAt.Location() != time.UTC {
		t.Fatalf("times of node %+v", n)
	}
	// Labels are an object even when the node has none.
	r := e.do("GET", "/v1/admin/nodes/"+b.ID.String(), e.admin, "").want(t, http.StatusOK)
	if !strings.Contains(string(r.body), `"labels":{}`) {
		t.Fatalf("node without labels: %s", r.body)
	}

	e.do("GET", "/v1/admin/nodes/"+model.NewNodeID().String(), e.admin, "").wantError(t, http.StatusNotFound, apiv1.CodeNodeNotFound)
	for _, bad := range []string{"node_short", "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		e.send(req{method: "GET", path: "/v1/admin/nodes/" + bad, key: e.admin, invalid: true}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
		e.send(req{method: "POST", path: "/v1/admin/nodes/" + bad + "/cordon", key: e.admin, invalid: true}).
			wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
	}
}

func TestNodesAdminOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.registerNode(nil)
	id := n.ID.String()
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/admin/nodes"},
		{"GET", "/v1/admin/nodes/" + id},
		{"POST", "/v1/admin/nodes/" + id + "/cordon"},
		{"POST", "/v1/admin/nodes/" + id + "/uncordon"},
		{"POST", "/v1/admin/nodes/" + id + "/drain"},
	} {
		e.do(r.method, r.path, e.keyA, "").wantError(t, http.StatusForbidden, apiv1.CodePermissionDenied)
		e.send(req{method: r.method, path: r.path, invalid: true}).wantError(t, http.StatusUnauthorized, apiv1.CodeUnauthenticated)
	}
	if got := e.getNode(n.ID); got.State != "active" {
		t.Fatalf("a refused request changed the node: %+v", got)
	}
}

func TestNodeCordonUncordonDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.registerNode(nil)
	busy := e.registerNode(nil)
	e.placeSandbox(busy.ID)

	for range 2 { // idempotent
		if got := e.setNode(n.ID, "cordon"); got.State != "cordoned" || got.Drained {
			t.Fatalf("cordon: %+v", got)
		}
	}
	if got := e.getNode(n.ID); got.State != "cordoned" {
		t.Fatalf("after cordon: %+v", got)
	}
	for range 2 {
		if got := e.setNode(n.ID, "uncordon"); got.State != "active" {
			t.Fatalf("uncordon: %+v", got)
		}
	}
	// Draining a node without sandboxes: drained at once.
	for range 2 {
		if got := e.setNode(n.ID, "drain"); got.State != "draining" || !got.Drained || got.Usage.Sandboxes != 0 {
			t.Fatalf("drain: %+v", got)
		}
	}
	// With a live sandbox it is draining but not drained.
	if got := e.setNode(busy.ID, "drain"); got.State != "draining" || got.Drained || got.Usage.Sandboxes != 1 {
		t.Fatalf("drain of a busy node: %+v", got)
	}
	if got := e.setNode(busy.ID, "uncordon"); got.State != "active" || got.Drained {
		t.Fatalf("uncordon of a draining node: %+v", got)
	}

	// An Idempotency-Key replays the first answer.
	h := http.Header{"Idempotency-Key": {"cordon-once"}}
	first := e.send(req{method: "POST", path: "/v1/admin/nodes/" + n.ID.String() + "/cordon", key: e.admin, header: h}).want(t, http.StatusOK)
	again := e.send(req{method: "POST", path: "/v1/admin/nodes/" + n.ID.String() + "/cordon", key: e.admin, header: h}).want(t, http.StatusOK)
	if string(first.body) != string(again.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %s / %s (%v)", first.body, again.body, again.header)
	}
	e.send(req{method: "POST", path: "/v1/admin/nodes/" + n.ID.String() + "/drain", key: e.admin, header: h}).
		wantError(t, http.StatusConflict, apiv1.CodeIdempotencyKeyReused)

	unknown := model.NewNodeID().String()
	for _, verb := range []string{"cordon", "uncordon", "drain"} {
		e.do("POST", "/v1/admin/nodes/"+unknown+"/"+verb, e.admin, "").wantError(t, http.StatusNotFound, apiv1.CodeNodeNotFound)
	}
	e.send(req{method: "POST", path: "/v1/admin/nodes/" + n.ID.String() + "/cordon", key: e.admin, body: `{"x": 1}`, invalid: true}).
		wantError(t, http.StatusBadRequest, apiv1.CodeInvalidRequest)
}

func TestNodeDeadRefusesStateChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	n := e.registerNode(nil)
	time.Sleep(30 * time.Millisecond)
	loss, err := e.st.DeclareDeadNodes(ctx, 10*time.Millisecond, "")
	if err != nil || !slices.Contains(loss.Nodes, n.ID) {
		t.Fatalf("DeclareDeadNodes = %+v, %v", loss, err)
	}
	got := e.getNode(n.ID)
	if got.State != "dead" || got.StateReason == "" || got.Drained {
		t.Fatalf("dead node %+v", got)
	}
	for _, verb := range []string{"cordon", "drain", "uncordon"} {
		r := e.do("POST", "/v1/admin/nodes/"+n.ID.String()+"/"+verb, e.admin, "").wantError(t, http.StatusConflict, apiv1.CodeInvalidTransition)
		if !strings.Contains(string(r.body), "dead") {
			t.Fatalf("%s: %s", verb, r.body)
		}
	}
	if got := e.getNode(n.ID); got.State != "dead" {
		t.Fatalf("after refused changes: %+v", got)
	}
}
