package integration

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/egress/nftrules"
	"github.com/airlockdev/airlock/internal/egress/sandboxnet"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/postgres"
)

// TestCluster runs one cluster (three nodes, two api replicas, one
// PostgreSQL; see cluster_harness_test.go) through its subtests in order.
// Each subtest deletes what it created and checks that nothing of it is
// left on any node.
func TestCluster(t *testing.T) {
	c := newCluster(t)
	t.Run("CreatesSpread", c.testCreatesSpread)
	t.Run("ExecOnHostingNode", c.testExecOnHostingNode)
	// NEEDS THE ROUTED DATA PLANE (not merged on this branch): fails until
	// an api replica forwards agent-needing requests and /data/ streams to
	// the hosting node.
	t.Run("ExecThroughReplica", c.testExecThroughReplica)
	t.Run("CordonAndDrain", c.testCordonAndDrain)
	t.Run("NodeLoss", c.testNodeLoss)
	t.Run("FencingAfterRestart", c.testFencingAfterRestart)
	t.Run("StoppedNodeExitsWhenFenced", c.testStoppedNodeExits)
	t.Run("RollingRestart", c.testRollingRestart)
}

// nodeSelector places a sandbox on the node server s (every node carries
// the label name=<its node ID>).
func nodeSelector(s *server) map[string]string {
	return map[string]string{"name": string(s.nodeID())}
}

// 1. Creates through both replicas are spread over every node; the sandbox
// JSON names its node; `airlock admin node list` shows the nodes' usage.
func (c *cluster) testCreatesSpread(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	const n = 6
	var ids []model.SandboxID
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	var ops []apiv1.SandboxWithOperation
	for i := range n {
		res, err := c.apis[i%2].client().CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create %d through replica %d: %v", i, i%2, err)
		}
		ids = append(ids, model.SandboxID(res.Sandbox.ID))
		ops = append(ops, res)
	}
	perNode := map[string]int{}
	onNode := map[string][]model.SandboxID{}
	for i, res := range ops {
		op, err := c.apis[(i+1)%2].client().WaitOperation(ctx, model.OperationID(res.Operation.ID))
		if err != nil || op.State != string(model.OpSucceeded) {
			t.Fatalf("create %s: %+v (%v)", res.Sandbox.ID, op, err)
		}
		// The JSON as it is sent: node_id names the node.
		var raw map[string]any
		if _, err := c.apis[i%2].apiJSON(ctx, "GET", "/v1/sandboxes/"+res.Sandbox.ID, nil, &raw); err != nil {
			t.Fatal(err)
		}
		node, _ := raw["node_id"].(string)
		if node == "" || raw["state"] != string(model.StateRunning) {
			t.Fatalf("sandbox %s: node_id %q, state %v", res.Sandbox.ID, node, raw["state"])
		}
		c.nodeOf(t, node) // one of the three
		perNode[node]++
		onNode[node] = append(onNode[node], model.SandboxID(res.Sandbox.ID))
	}
	// Each node's egress is its own namespace's: its nftables set holds
	// the host veths of its sandboxes, and of no other node's.
	for _, s := range c.nodes {
		var members []string
		s.inNetns(func() {
			conn, err := nftables.New()
			if err != nil {
				t.Errorf("nftables: %v", err)
				return
			}
			defer conn.CloseLasting()
			if members, err = nftrules.Sandboxes(conn); err != nil {
				t.Errorf("nftables set of node %s: %v", s.nodeID(), err)
			}
		})
		var want []string
		for _, id := range onNode[string(s.nodeID())] {
			want = append(want, sandboxnet.HostIfName(id))
		}
		slices.Sort(members)
		slices.Sort(want)
		if !slices.Equal(members, want) {
			t.Errorf("node %s's nftables set holds %v, want the veths of its sandboxes %v", s.nodeID(), members, want)
		}
	}
	if len(perNode) != len(c.nodes) {
		t.Fatalf("%d creates were placed on %d of %d nodes: %v", n, len(perNode), len(c.nodes), perNode)
	}
	t.Logf("placement: %v", perNode)

	stdout, stderr, code := c.apis[1].cli(ctx, "-o", "json", "admin", "node", "list")
	var list apiv1.NodeList
	if code != 0 || json.Unmarshal([]byte(stdout), &list) != nil {
		t.Fatalf("admin node list: %d\n%s\n%s", code, stdout, stderr)
	}
	roles := map[string]int{}
	for _, nd := range list.Nodes {
		roles[nd.Role]++
		if nd.Role != string(model.RoleNode) {
			continue
		}
		if nd.State != string(model.NodeActive) || nd.Usage.Sandboxes != perNode[nd.ID] || nd.Capacity.Slots != clusterSlots {
			t.Errorf("node %s: state %s, usage %d sandboxes (want %d), slots %d", nd.ID, nd.State, nd.Usage.Sandboxes, perNode[nd.ID], nd.Capacity.Slots)
		}
	}
	if roles[string(model.RoleNode)] != 3 || roles[string(model.RoleAPI)] != 2 {
		t.Fatalf("admin node list: roles %v, want 3 nodes and 2 api replicas:\n%s", roles, stdout)
	}
	stdout, _, code = c.apis[0].cli(ctx, "admin", "node", "list")
	for _, s := range c.nodes {
		if code != 0 || !strings.Contains(stdout, string(s.nodeID())) {
			t.Fatalf("admin node list (table) lacks node %s: %d\n%s", s.nodeID(), code, stdout)
		}
	}
	t.Logf("admin node list:\n%s", stdout)
}

// 2a. A command runs in a sandbox through its hosting node's own API.
func (c *cluster) testExecOnHostingNode(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	var ids []model.SandboxID
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	for _, s := range c.nodes {
		sb := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
		ids = append(ids, model.SandboxID(sb.ID))
		if sb.NodeID != string(s.nodeID()) {
			t.Fatalf("sandbox %s with selector %v is on %s", sb.ID, nodeSelector(s), sb.NodeID)
		}
		res := execIn(ctx, t, s.client(), model.SandboxID(sb.ID), "sh", "-c", "echo hello from $(hostname)")
		if res.exitCode != 0 || !strings.HasPrefix(res.stdout, "hello from") {
			t.Fatalf("exec on node %s: %+v", s.nodeID(), res)
		}
	}
}

// 2b. NEEDS THE ROUTED DATA PLANE: a command runs in a sandbox through any
// replica, and through a node that does not host it.
func (c *cluster) testExecThroughReplica(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	var ids []model.SandboxID
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	host, other := c.nodes[0], c.nodes[1]
	sb := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(host)})
	ids = append(ids, model.SandboxID(sb.ID))
	for _, via := range []*server{c.apis[0], c.apis[1], other} {
		res := execIn(ctx, t, via.client(), model.SandboxID(sb.ID), "echo", "routed")
		if res.exitCode != 0 || res.stdout != "routed\n" {
			t.Fatalf("exec through %s: %+v", via.url, res)
		}
	}
}

// Cordon and drain through the CLI against a replica: a cordoned node
// takes no new sandboxes (one that may only run there is refused with
// no_eligible_node), its own run on; a drain waits for its last one.
func (c *cluster) testCordonAndDrain(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	var ids []model.SandboxID
	t.Cleanup(func() {
		c.apis[0].cli(ctxFor(t, 30*time.Second), "admin", "node", "uncordon", string(c.nodes[1].nodeID()))
		c.deleteAll(ctxFor(t, time.Minute), t, ids)
	})
	s := c.nodes[1]
	id := s.nodeID().String()
	on := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
	ids = append(ids, model.SandboxID(on.ID))

	if stdout, stderr, code := c.apis[1].cli(ctx, "admin", "node", "cordon", id); code != 0 || !strings.Contains(stdout, "cordoned") {
		t.Fatalf("cordon: %d\n%s\n%s", code, stdout, stderr)
	}
	for i := range 3 {
		sb, op := createWait(ctx, t, c.apis[i%2].client(), apiv1.CreateSandboxRequest{})
		ids = append(ids, model.SandboxID(sb.ID))
		if op.State != string(model.OpSucceeded) || sb.NodeID == id {
			t.Errorf("create while %s is cordoned: %s on %s", id, op.State, sb.NodeID)
		}
	}
	_, err := c.apis[0].client().CreateSandbox(ctx, apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != apiv1.CodeNoEligibleNode {
		t.Errorf("create that only the cordoned node may run: %v, want %s", err, apiv1.CodeNoEligibleNode)
	}
	if res := execIn(ctx, t, s.client(), model.SandboxID(on.ID), "echo", "still"); res.stdout != "still\n" {
		t.Errorf("exec on the cordoned node: %+v", res)
	}

	type result struct {
		stdout, stderr string
		code           int
	}
	drained := make(chan result, 1)
	go func() {
		// Not c.apis[0].cli: it may not call t.Fatal off the test's goroutine.
		cmd := c.apis[0].command(ctx, c.bins.airlock, "admin", "node", "drain", id, "--wait", "--timeout", "60s", "--interval", "200ms")
		cmd.Env = append(os.Environ(), "AIRLOCK_URL="+c.apis[0].url, "AIRLOCK_API_KEY="+c.apis[0].key)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if err != nil {
			code = -1
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			}
		}
		drained <- result{out.String(), errb.String(), code}
	}()
	time.Sleep(time.Second)
	select {
	case r := <-drained:
		t.Fatalf("drain --wait ended while a sandbox was left on the node: %+v", r)
	default:
	}
	if _, err := c.apis[1].client().DeleteSandbox(ctx, model.SandboxID(on.ID)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-drained:
		if r.code != 0 {
			t.Fatalf("drain --wait: %+v", r)
		}
	case <-ctx.Done():
		t.Fatal("drain --wait did not end after the node's last sandbox was deleted")
	}
	n, err := c.apis[1].client().GetNode(ctx, s.nodeID())
	if err != nil || n.State != string(model.NodeDraining) || !n.Drained {
		t.Errorf("node after the drain: %s drained=%v (%v)", n.State, n.Drained, err)
	}
	if stdout, stderr, code := c.apis[1].cli(ctx, "admin", "node", "uncordon", id); code != 0 || !strings.Contains(stdout, "active") {
		t.Fatalf("uncordon: %d\n%s\n%s", code, stdout, stderr)
	}
	sb := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
	ids = append(ids, model.SandboxID(sb.ID))
}

// 3. SIGKILL of a node: the others serve on; its sandboxes become failed
// ("node lost") within the limit; creates made during and right after the
// kill succeed on the other nodes; the node is listed dead.
func (c *cluster) testNodeLoss(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	var (
		idsMu sync.Mutex
		ids   []model.SandboxID
	)
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	// The victim and the survivor carry pool=b; the victim holds fewer
	// sandboxes, so the first create for pool=b after the kill is placed
	// on it (it is not yet known to be dead) and must be placed again.
	victim, survivor := c.nodes[2], c.nodes[0]
	var lost []model.SandboxID
	sb := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(victim)})
	ids = append(ids, model.SandboxID(sb.ID))
	lost = append(lost, model.SandboxID(sb.ID))
	var kept apiv1.Sandbox
	for range 2 {
		kept = createSandbox(ctx, t, c.apis[1].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(survivor)})
		ids = append(ids, model.SandboxID(kept.ID))
	}

	victim.kill()
	killed := time.Now()
	moved, err := c.apis[0].client().CreateSandbox(ctx, apiv1.CreateSandboxRequest{NodeSelector: map[string]string{"pool": "b"}})
	if err != nil {
		t.Fatalf("create right after the kill: %v", err)
	}
	ids = append(ids, model.SandboxID(moved.Sandbox.ID))
	if moved.Sandbox.NodeID != string(victim.nodeID()) {
		t.Errorf("the create for pool=b right after the kill was placed on %s, not on the killed node (which held fewer sandboxes)", moved.Sandbox.NodeID)
	}

	// Creates during the loss: placed by the replicas while the node is
	// not yet declared dead (some may land on it and are placed again).
	type created struct {
		sb apiv1.Sandbox
		op apiv1.Operation
	}
	var wg sync.WaitGroup
	results := make(chan created, 8)
	createSome := func(k int) {
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl := c.apis[i%2].client()
				res, err := cl.CreateSandbox(ctx, apiv1.CreateSandboxRequest{})
				if err != nil {
					t.Errorf("create during the node loss: %v", err)
					return
				}
				idsMu.Lock()
				ids = append(ids, model.SandboxID(res.Sandbox.ID))
				idsMu.Unlock()
				op, err := cl.WaitOperation(ctx, model.OperationID(res.Operation.ID))
				if err != nil {
					t.Errorf("wait for create %s: %v", res.Sandbox.ID, err)
					return
				}
				sb, err := cl.GetSandbox(ctx, model.SandboxID(res.Sandbox.ID))
				if err != nil {
					t.Errorf("get %s: %v", res.Sandbox.ID, err)
					return
				}
				results <- created{sb, op}
			}()
		}
	}
	createSomeDone := make(chan struct{})
	createSome(3)

	// The lost sandboxes fail within dead-after and a few heartbeats.
	limit := clusterDeadAfter + 5*clusterHeartbeat
	for _, id := range lost {
		for {
			sb, err := c.apis[0].client().GetSandbox(ctx, id)
			if err == nil && sb.State == string(model.StateFailed) {
				if sb.StateReason != model.NodeLostReason {
					t.Errorf("lost sandbox %s: reason %q, want %q", id, sb.StateReason, model.NodeLostReason)
				}
				break
			}
			if time.Since(killed) > limit+10*time.Second {
				t.Fatalf("sandbox %s of the killed node is still %s after %v", id, sb.State, time.Since(killed))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	noticed := time.Since(killed)
	t.Logf("the killed node's sandboxes were failed %v after the kill (dead-after %v, heartbeat %v)", noticed.Round(time.Millisecond), clusterDeadAfter, clusterHeartbeat)
	if noticed > limit {
		t.Errorf("the node's loss took %v to notice, more than dead-after + 5 heartbeats (%v)", noticed, limit)
	}
	// And right after the loss was noticed.
	createSome(3)
	go func() { wg.Wait(); close(createSomeDone) }()
	select {
	case <-createSomeDone:
	case <-ctx.Done():
		t.Fatal("creates did not end")
	}
	close(results)
	for r := range results {
		if r.op.State != string(model.OpSucceeded) || r.sb.State != string(model.StateRunning) {
			t.Errorf("create %s during the node loss: op %s %+v, sandbox %s (%s)", r.sb.ID, r.op.State, r.op.Error, r.sb.State, r.sb.StateReason)
		}
		if r.sb.NodeID == string(victim.nodeID()) {
			t.Errorf("create %s ended on the dead node", r.sb.ID)
		}
	}

	// The create placed on the dead node was placed again and ran.
	if op, err := c.apis[1].client().WaitOperation(ctx, model.OperationID(moved.Operation.ID)); err != nil || op.State != string(model.OpSucceeded) {
		t.Errorf("the create placed on the killed node: %+v (%v)", op, err)
	}
	if got, err := c.apis[1].client().GetSandbox(ctx, model.SandboxID(moved.Sandbox.ID)); err != nil ||
		got.State != string(model.StateRunning) || got.NodeID != string(survivor.nodeID()) {
		t.Errorf("the create placed on the killed node ended %s on %s (%v), want running on %s", got.State, got.NodeID, err, survivor.nodeID())
	}

	// The others serve on.
	if res := execIn(ctx, t, survivor.client(), model.SandboxID(kept.ID), "echo", "alive"); res.stdout != "alive\n" {
		t.Errorf("exec on a surviving node: %+v", res)
	}
	var node apiv1.Node
	if _, err := c.apis[1].apiJSON(ctx, "GET", "/v1/admin/nodes/"+string(victim.nodeID()), nil, &node); err != nil {
		t.Fatal(err)
	}
	if node.State != string(model.NodeDead) || node.StateReason == "" {
		t.Errorf("the killed node is listed %s (%q), want dead", node.State, node.StateReason)
	}
	var list apiv1.NodeList
	if _, err := c.apis[0].apiJSON(ctx, "GET", "/v1/admin/nodes", nil, &list); err != nil {
		t.Fatal(err)
	}
	for _, nd := range list.Nodes {
		if nd.ID == string(victim.nodeID()) && nd.State != string(model.NodeDead) {
			t.Errorf("GET /v1/admin/nodes lists the killed node %s", nd.State)
		}
	}

	// The node starts again (a new incarnation) and becomes active; its
	// lost sandboxes stay failed until deleted, and nothing runs for them
	// on its host any more (its first resync removes their containers).
	victim.start()
	c.waitActive(ctx, t)
	time.Sleep(5 * clusterHeartbeat)
	for _, id := range lost {
		sb, err := c.apis[0].client().GetSandbox(ctx, id)
		if err != nil || sb.State != string(model.StateFailed) {
			t.Errorf("lost sandbox %s after its node came back: %s (%v)", id, sb.State, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for victim.containerStatus(id) != "none" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if st := victim.containerStatus(id); st != "none" {
			t.Errorf("container of the lost sandbox %s on the rejoined node: %s, want none", id, st)
		}
	}
}

// openStore opens the cluster's database in the test, as a process of an
// old incarnation would write to it.
func (c *cluster) openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := postgres.Open(ctxFor(t, 30*time.Second), c.dsn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// 4a. Fencing: nothing written with a node's old incarnation is accepted
// once another run of the node registered, even by a writer that holds
// the lease of a running operation; the restarted node has a new
// incarnation, becomes active and finishes what the old one left.
//
// The old incarnation is played by the test itself, on the store: the node
// is killed, a create is placed on it, the test claims that create with
// the old incarnation (as the killed process would have), then registers a
// new run of the node (as a restart elsewhere would), and writes with the
// old incarnation again.
func (c *cluster) testFencingAfterRestart(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	var ids []model.SandboxID
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	st := c.openStore(t)
	s := c.nodes[1]
	adopted := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
	ids = append(ids, model.SandboxID(adopted.ID))
	before, err := st.GetNode(ctx, s.nodeID())
	if err != nil {
		t.Fatal(err)
	}
	old := store.Fence{Node: s.nodeID(), Incarnation: before.Incarnation}

	// Everything up to the new registration happens well within
	// dead-after, so the node is not declared dead meanwhile.
	s.kill()
	res, err := c.apis[1].client().CreateSandbox(ctx, apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
	if err != nil {
		t.Fatal(err)
	}
	pending := model.SandboxID(res.Sandbox.ID)
	ids = append(ids, pending)
	if res.Sandbox.NodeID != string(s.nodeID()) {
		t.Fatalf("create with selector %v placed on %q", nodeSelector(s), res.Sandbox.NodeID)
	}
	now, err := st.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claim := store.Claim{Owner: old.Node, Incarnation: old.Incarnation, Lease: time.Minute, Now: now}
	held, err := st.ClaimOperation(ctx, claim)
	if err != nil || held.ID != model.OperationID(res.Operation.ID) {
		t.Fatalf("claim with the killed node's incarnation: %+v (%v), want the create %s", held, err, res.Operation.ID)
	}
	fresh := before.Node
	fresh.Incarnation = model.NewIncarnation()
	if _, err := st.RegisterNode(ctx, fresh); err != nil {
		t.Fatal(err)
	}

	if _, err := st.Heartbeat(ctx, old); !errors.Is(err, store.ErrFenced) {
		t.Errorf("heartbeat of the old incarnation: %v, want ErrFenced", err)
	}
	if _, err := st.ClaimOperation(ctx, claim); !errors.Is(err, store.ErrFenced) {
		t.Errorf("claim by the old incarnation: %v, want ErrFenced", err)
	}
	if err := st.RenewLease(ctx, held.ID, claim); !errors.Is(err, store.ErrFenced) {
		t.Errorf("lease renewal by the old incarnation: %v, want ErrFenced", err)
	}
	if err := st.SetNodeTemplates(ctx, old, nil); !errors.Is(err, store.ErrFenced) {
		t.Errorf("templates of the old incarnation: %v, want ErrFenced", err)
	}
	if err := st.TransitionOnNode(ctx, pending, old, model.StatePending, model.StateCreating, "", "runc", now); !errors.Is(err, store.ErrFenced) {
		t.Errorf("transition by the old incarnation: %v, want ErrFenced", err)
	}
	err = st.FinishOperation(ctx, store.Finish{OperationID: held.ID, Owner: old.Node, Incarnation: old.Incarnation,
		State: model.OpFailed, Error: &model.OperationError{Code: "fenced", Message: "must not be written"},
		SandboxFrom: model.StatePending, SandboxTo: model.StateFailed, SandboxReason: "must not be written", Now: now})
	if !errors.Is(err, store.ErrFenced) {
		t.Errorf("finish by the old incarnation that holds the lease: %v, want ErrFenced", err)
	}
	if op, err := c.apis[0].client().GetOperation(ctx, held.ID, 0); err != nil || op.State != string(model.OpRunning) {
		t.Errorf("the create after the fenced writes: %+v (%v), want still running", op, err)
	}

	// The node starts again: a new incarnation, active; it finishes the
	// create the old one held and adopts the sandbox it ran.
	s.start()
	c.waitActive(ctx, t)
	after, err := st.GetNode(ctx, s.nodeID())
	if err != nil {
		t.Fatal(err)
	}
	if after.Incarnation == before.Incarnation || after.Incarnation == fresh.Incarnation || after.State != model.NodeActive {
		t.Fatalf("after a restart: incarnation %s (was %s, then %s), state %s", after.Incarnation, before.Incarnation, fresh.Incarnation, after.State)
	}
	op, err := c.apis[0].client().WaitOperation(ctx, held.ID)
	if err != nil || op.State != string(model.OpSucceeded) {
		t.Fatalf("the create the old incarnation held, after the restart: %+v (%v)", op, err)
	}
	for _, id := range []model.SandboxID{model.SandboxID(adopted.ID), pending} {
		if res := execIn(ctx, t, s.client(), id, "echo", "ok"); res.stdout != "ok\n" {
			t.Errorf("exec in %s after the restart: %+v", id, res)
		}
	}
}

// 4b. A node process that is stopped (SIGSTOP) long enough to be declared
// dead and then continues exits by itself: its heartbeat is fenced. It
// overwrites nothing: its sandboxes stay failed.
func (c *cluster) testStoppedNodeExits(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 2*time.Minute)
	var ids []model.SandboxID
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	s := c.nodes[0]
	sb := createSandbox(ctx, t, c.apis[0].client(), apiv1.CreateSandboxRequest{NodeSelector: nodeSelector(s)})
	id := model.SandboxID(sb.ID)
	ids = append(ids, id)

	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
	defer cont()
	failed := c.apis[1].waitState(ctx, id, model.StateFailed)
	if failed.StateReason != model.NodeLostReason {
		t.Errorf("sandbox of the stopped node: reason %q", failed.StateReason)
	}
	t.Logf("the stopped node was declared dead after %v", time.Since(stopped).Round(time.Millisecond))
	// Some more heartbeats' time, then it continues.
	time.Sleep(3 * clusterHeartbeat)
	cont()
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("the node did not exit after it was fenced:\n%s", tail(s.log.String(), 40))
	}
	code := s.cmd.ProcessState.ExitCode()
	s.cmd = nil
	if !strings.Contains(s.log.String(), "was declared dead or started elsewhere") {
		t.Errorf("the node's log does not say why it stopped:\n%s", tail(s.log.String(), 20))
	}
	if code == 0 {
		t.Errorf("the fenced node exited with status 0")
	}
	got, err := c.apis[0].client().GetSandbox(ctx, id)
	if err != nil || got.State != string(model.StateFailed) || got.StateReason != model.NodeLostReason {
		t.Errorf("sandbox after the fenced node continued: %s %q (%v)", got.State, got.StateReason, err)
	}
	var node apiv1.Node
	if _, err := c.apis[0].apiJSON(ctx, "GET", "/v1/admin/nodes/"+string(s.nodeID()), nil, &node); err != nil || node.State != string(model.NodeDead) {
		t.Errorf("the fenced node after it continued: %s (%v), want still dead", node.State, err)
	}
	// It rejoins when started again; the sandbox stays failed.
	s.start()
	c.waitActive(ctx, t)
	time.Sleep(5 * clusterHeartbeat)
	if got, err := c.apis[0].client().GetSandbox(ctx, id); err != nil || got.State != string(model.StateFailed) {
		t.Errorf("sandbox after its node rejoined: %s %q (%v)", got.State, got.StateReason, err)
	}
}

// 5. Every process restarts in turn (SIGTERM, start) while a client keeps
// creating and deleting sandboxes through the replicas: every operation the
// API accepted ends, and every create ends succeeded (or failed with a
// reason, its sandbox failed).
func (c *cluster) testRollingRestart(t *testing.T) {
	c.use(t)
	ctx := ctxFor(t, 3*time.Minute)
	type accepted struct {
		sandbox model.SandboxID
		op      model.OperationID
		kind    string
	}
	var (
		mu      sync.Mutex
		ops     []accepted
		ids     []model.SandboxID
		refused int
	)
	t.Cleanup(func() { c.deleteAll(ctxFor(t, time.Minute), t, ids) })
	clients := make([]*client.Client, len(c.apis))
	for i, s := range c.apis {
		cl, err := client.New(s.url, s.key, append(s.clientOptions(), client.WithRetries(0, 0))...)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = cl
	}
	stop := make(chan struct{})
	churnDone := make(chan struct{})
	// The client keeps up to four sandboxes: it creates one, and deletes
	// the oldest once its create has ended (a delete that supersedes a
	// create would prove less).
	go func() {
		defer close(churnDone)
		type entry struct {
			id model.SandboxID
			op model.OperationID
		}
		var live []entry
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cl := clients[i%len(clients)]
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if len(live) >= 4 {
				e := live[0]
				op, err := cl.GetOperation(rctx, e.op, 0)
				if err == nil && op.State != string(model.OpSucceeded) && op.State != string(model.OpFailed) {
					cancel()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				var res apiv1.OperationResponse
				if err == nil {
					res, err = cl.DeleteSandbox(rctx, e.id)
				}
				cancel()
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				live = live[1:]
				mu.Lock()
				ops = append(ops, accepted{e.id, model.OperationID(res.Operation.ID), "delete"})
				mu.Unlock()
				continue
			}
			res, err := cl.CreateSandbox(rctx, apiv1.CreateSandboxRequest{})
			cancel()
			if err != nil {
				mu.Lock()
				refused++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			e := entry{model.SandboxID(res.Sandbox.ID), model.OperationID(res.Operation.ID)}
			live = append(live, e)
			mu.Lock()
			ids = append(ids, e.id)
			ops = append(ops, accepted{e.id, e.op, "create"})
			mu.Unlock()
		}
	}()
	begin := time.Now()
	for _, s := range c.all() {
		time.Sleep(500 * time.Millisecond)
		down := time.Now()
		s.stop()
		s.start()
		t.Logf("%s %s restarted in %v", s.nodeRole(), s.url, time.Since(down).Round(time.Millisecond))
		if slices.Contains(c.nodes, s) {
			c.waitActive(ctx, t)
		}
	}
	time.Sleep(time.Second)
	close(stop)
	<-churnDone
	t.Logf("rolling restart of %d processes took %v", len(c.all()), time.Since(begin).Round(time.Millisecond))
	// Every accepted operation ends.
	mu.Lock()
	defer mu.Unlock()
	var creates, deletes, failedCreates int
	deleted := map[model.SandboxID]bool{}
	for _, a := range ops {
		if a.kind == "delete" {
			deleted[a.sandbox] = true
		}
	}
	for _, a := range ops {
		var op apiv1.Operation
		for {
			got, err := c.apis[0].client().GetOperation(ctx, a.op, 0)
			if err == nil && (got.State == string(model.OpSucceeded) || got.State == string(model.OpFailed)) {
				op = got
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s operation %s of %s never ended: %+v (%v)", a.kind, a.op, a.sandbox, got, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sb, err := c.apis[0].client().GetSandbox(ctx, a.sandbox)
		if err != nil {
			t.Fatal(err)
		}
		switch a.kind {
		case "create":
			creates++
			if op.State == string(model.OpFailed) {
				failedCreates++
				if op.Error == nil || op.Error.Message == "" || sb.State != string(model.StateFailed) && sb.State != string(model.StateDeleting) && sb.State != string(model.StateDeleted) {
					t.Errorf("create %s of %s failed without a reason or a failed sandbox: %+v, sandbox %s", a.op, a.sandbox, op.Error, sb.State)
				}
				t.Logf("create %s failed: %+v", a.sandbox, op.Error)
			} else if !deleted[a.sandbox] && sb.State != string(model.StateRunning) {
				// Every node restarted faster than it is declared dead:
				// what it ran was adopted by its next incarnation.
				t.Errorf("sandbox %s is %s (%q) after the rolling restart, want running", a.sandbox, sb.State, sb.StateReason)
			}
		case "delete":
			deletes++
			if op.State != string(model.OpSucceeded) || sb.State != string(model.StateDeleted) {
				t.Errorf("delete %s of %s: %s %+v, sandbox %s", a.op, a.sandbox, op.State, op.Error, sb.State)
			}
		}
	}
	t.Logf("during the rolling restart: %d creates (%d failed), %d deletes accepted, %d requests refused (a replica was down)", creates, failedCreates, deletes, refused)
	if creates < 5 {
		t.Errorf("only %d creates were accepted during the rolling restart", creates)
	}
}

// 6. --role api or node without --database-url is a usage error.
func TestClusterRoleNeedsDatabase(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, role := range []string{"api", "node"} {
		cmd := exec.Command(bins.airlock, "server", "--data-dir", shortTempDir(t), "--role", role, "--listen", "127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
			t.Fatalf("--role %s without --database-url: %v, want exit status 2 (usage)\n%s", role, err, out)
		}
		if !strings.Contains(string(out), "--role "+role+" needs --database-url") {
			t.Fatalf("--role %s without --database-url says:\n%s", role, out)
		}
	}
}
