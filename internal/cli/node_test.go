package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// fakeNodes serves /v1/admin/nodes on a fakeServer. A draining node loses
// one sandbox on every GET of it.
type fakeNodes struct {
	mu     sync.Mutex
	nodes  []apiv1.Node
	posts  []string // "verb id"
	idem   []string // Idempotency-Key of every POST
	frozen bool     // sandboxes never end
	undo   bool     // a GET finds the node active again (an operator uncordoned it)
}

func newFakeNodes(t *testing.T, f *fakeServer, nodes ...apiv1.Node) *fakeNodes {
	fn := &fakeNodes{nodes: nodes}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/nodes", func(w http.ResponseWriter, r *http.Request) {
		fn.mu.Lock()
		defer fn.mu.Unlock()
		writeJSON(w, 200, apiv1.NodeList{Nodes: fn.nodes})
	})
	mux.HandleFunc("GET /v1/admin/nodes/{id}", func(w http.ResponseWriter, r *http.Request) {
		fn.mu.Lock()
		defer fn.mu.Unlock()
		n := fn.find(w, r)
		if n == nil {
			return
		}
		if fn.undo {
			n.State = "active"
		}
		if n.State == "draining" && n.Usage.Sandboxes > 0 && !fn.frozen {
			n.Usage.Sandboxes--
		}
		n.Drained = n.State == "draining" && n.Usage.Sandboxes == 0
		writeJSON(w, 200, n)
	})
	mux.HandleFunc("POST /v1/admin/nodes/{id}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		fn.mu.Lock()
		defer fn.mu.Unlock()
		n := fn.find(w, r)
		if n == nil {
			return
		}
		verb := r.PathValue("verb")
		fn.posts = append(fn.posts, verb+" "+n.ID)
		fn.idem = append(fn.idem, r.Header.Get("Idempotency-Key"))
		if n.State == "dead" {
			writeJSON(w, 409, apiv1.Error{Code: apiv1.CodeInvalidTransition, Message: "node " + n.ID + " is dead and cannot be changed"})
			return
		}
		n.State = map[string]string{"cordon": "cordoned", "uncordon": "active", "drain": "draining"}[verb]
		n.Drained = n.State == "draining" && n.Usage.Sandboxes == 0
		writeJSON(w, 200, n)
	})
	prev := f.srv.Config.Handler
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/admin/nodes") && r.Header.Get("Authorization") == "Bearer key_test" {
			mux.ServeHTTP(w, r)
			return
		}
		prev.ServeHTTP(w, r)
	})
	return fn
}

func (fn *fakeNodes) find(w http.ResponseWriter, r *http.Request) *apiv1.Node {
	for i := range fn.nodes {
		if fn.nodes[i].ID == r.PathValue("id") {
			return &fn.nodes[i]
		}
	}
	writeJSON(w, 404, apiv1.Error{Code: apiv1.CodeNodeNotFound, Message: "node " + r.PathValue("id") + " not found"})
	return nil
}

func testNode(sandboxes int) apiv1.Node {
	return apiv1.Node{
		ID: model.NewNodeID().String(), Incarnation: model.NewIncarnation().String(), Role: "all",
		AdvertiseURL: "http://10.0.0.7:7070", State: "active", Labels: map[string]string{"zone": "a"},
		Capacity: apiv1.NodeCapacity{Slots: 10, CPUs: 8, MemoryMiB: 16384, Pids: 29491},
		Usage:    apiv1.NodeUsage{Sandboxes: sandboxes, CPUs: 2 * sandboxes, MemoryMiB: 1024 * sandboxes, Pids: 1088 * sandboxes},
		CanPull:  true, StartedAt: fixedTime, HeartbeatAt: fixedTime.Add(time.Minute), HeartbeatAgeMS: 1234,
	}
}

func TestNodeListAndGet(t *testing.T) {
	f := newFakeServer(t)
	a, b := testNode(3), testNode(0)
	b.State, b.StateReason, b.HeartbeatAgeMS = "dead", "no heartbeat for 30s", 95_400
	b.Capacity = apiv1.NodeCapacity{}
	newFakeNodes(t, f, a, b)
	ctx := context.Background()

	code, stdout, stderr := runCLI(ctx, f, "admin", "node", "list")
	out := squash(stdout)
	if code != 0 || !strings.Contains(out, "ID ROLE STATE SANDBOXES SLOTS MEMORY PIDS HEARTBEAT URL\n") ||
		!strings.Contains(out, a.ID+" all active 3 10 3072/16384 MiB 3264/29491 1.2s ago http://10.0.0.7:7070\n") ||
		!strings.Contains(out, b.ID+" all dead 0 - 0/- MiB 0/- 1m35s ago http://10.0.0.7:7070\n") {
		t.Fatalf("list: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "admin", "node", "list")
	var l apiv1.NodeList
	if code != 0 || json.Unmarshal([]byte(stdout), &l) != nil || len(l.Nodes) != 2 || l.Nodes[0].ID != a.ID ||
		l.Nodes[1].StateReason != "no heartbeat for 30s" || l.Nodes[0].Capacity.MemoryMiB != 16384 {
		t.Fatalf("list json: %d %s", code, stdout)
	}

	code, stdout, stderr = runCLI(ctx, f, "admin", "node", "get", b.ID)
	out = squash(stdout)
	if code != 0 || !strings.Contains(out, "State: dead\n") || !strings.Contains(out, "Reason: no heartbeat for 30s\n") ||
		!strings.Contains(out, "Labels: zone=a\n") || !strings.Contains(out, "Heartbeat: 2026-11-30T12:01:00Z (1m35s ago)\n") ||
		!strings.Contains(out, "Pids: 0/- host tasks\n") {
		t.Fatalf("get: %d\n%s\n%s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(ctx, f, "admin", "node", "get", model.NewNodeID().String())
	if code != 1 || !strings.Contains(stderr, "node_not_found") {
		t.Fatalf("get unknown: %d %s", code, stderr)
	}
	for _, args := range [][]string{{"get"}, {"get", "not-a-node"}, {"cordon"}, {"drain", "node_x"}, {"uncordon", a.ID, b.ID}} {
		code, _, stderr := runCLI(ctx, f, append([]string{"admin", "node"}, args...)...)
		if code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, %s; want a usage error", args, code, stderr)
		}
	}
}

func TestNodeCordonUncordon(t *testing.T) {
	f := newFakeServer(t)
	a, dead := testNode(1), testNode(0)
	dead.State = "dead"
	fn := newFakeNodes(t, f, a, dead)
	ctx := context.Background()

	code, stdout, stderr := runCLI(ctx, f, "admin", "node", "cordon", a.ID)
	if code != 0 || !strings.Contains(squash(stdout), "State: cordoned\n") {
		t.Fatalf("cordon: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(ctx, f, "-o", "json", "admin", "node", "uncordon", a.ID)
	var n apiv1.Node
	if code != 0 || json.Unmarshal([]byte(stdout), &n) != nil || n.State != "active" {
		t.Fatalf("uncordon: %d %s", code, stdout)
	}
	code, _, stderr = runCLI(ctx, f, "admin", "node", "cordon", dead.ID)
	if code != 1 || !strings.Contains(stderr, "is dead") || !strings.Contains(stderr, "invalid_transition") {
		t.Fatalf("cordon of a dead node: %d %s", code, stderr)
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if want := []string{"cordon " + a.ID, "uncordon " + a.ID, "cordon " + dead.ID}; strings.Join(fn.posts, ",") != strings.Join(want, ",") {
		t.Fatalf("posts %v, want %v", fn.posts, want)
	}
	for _, k := range fn.idem {
		if k == "" {
			t.Fatal("a POST without an Idempotency-Key")
		}
	}
}

func TestNodeDrain(t *testing.T) {
	f := newFakeServer(t)
	busy, empty, stuck := testNode(3), testNode(0), testNode(2)
	fn := newFakeNodes(t, f, busy, empty, stuck)
	ctx := context.Background()

	// Without --wait: the node as the drain left it.
	code, stdout, stderr := runCLI(ctx, f, "admin", "node", "drain", empty.ID)
	if code != 0 || !strings.Contains(squash(stdout), "State: draining (drained)\n") {
		t.Fatalf("drain: %d\n%s\n%s", code, stdout, stderr)
	}

	// --wait polls until no sandbox is left, printing each new count once.
	code, stdout, stderr = runCLI(ctx, f, "-o", "json", "admin", "node", "drain", busy.ID, "--wait", "--interval", "1ms")
	var n apiv1.Node
	if code != 0 || json.Unmarshal([]byte(stdout), &n) != nil || !n.Drained || n.Usage.Sandboxes != 0 {
		t.Fatalf("drain --wait: %d\n%s\n%s", code, stdout, stderr)
	}
	want := "node " + busy.ID + ": 3 sandboxes left\n" + "node " + busy.ID + ": 2 sandboxes left\n" +
		"node " + busy.ID + ": 1 sandbox left\n" + "node " + busy.ID + ": 0 sandboxes left\n"
	if stderr != want {
		t.Fatalf("progress:\n%s\nwant:\n%s", stderr, want)
	}

	// Sandboxes that do not end: --timeout fails the wait.
	fn.mu.Lock()
	fn.frozen = true
	fn.mu.Unlock()
	start := time.Now()
	code, stdout, stderr = runCLI(ctx, f, "admin", "node", "drain", stuck.ID, "--wait", "--timeout", "50ms", "--interval", "5ms")
	if code != 1 || !strings.Contains(stderr, "node "+stuck.ID+": 2 sandboxes left\n") ||
		strings.Count(stderr, "sandboxes left") != 1 ||
		!strings.Contains(stderr, "error: node "+stuck.ID+" still has 2 sandboxes after --timeout 50ms") ||
		!strings.Contains(squash(stdout), "State: draining\n") {
		t.Fatalf("drain --wait --timeout: %d\n%s\n%s", code, stdout, stderr)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the timeout was not kept")
	}

	// Uncordoned meanwhile: the wait ends with an error.
	fn.mu.Lock()
	fn.undo = true
	fn.mu.Unlock()
	code, _, stderr = runCLI(ctx, f, "admin", "node", "drain", stuck.ID, "--wait", "--interval", "1ms")
	if code != 1 || !strings.Contains(stderr, "error: node "+stuck.ID+" is active, no longer draining; 2 sandboxes left") {
		t.Fatalf("drain --wait of an uncordoned node: %d %s", code, stderr)
	}

	for _, args := range [][]string{
		{busy.ID, "--timeout", "1m"},
		{busy.ID, "--wait", "--timeout", "-1s"},
		{"not-a-node", "--wait"},
	} {
		code, _, stderr := runCLI(ctx, f, append([]string{"admin", "node", "drain"}, args...)...)
		if code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, %s; want a usage error", args, code, stderr)
		}
	}
}
