package placement

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/environment/registry"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/sqlite"
)

// fixture is a store with nodes, one environment (runc) and one template.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	st      store.Store
	project model.ProjectID
	tpl     model.TemplateDigest
	runc    model.EnvironmentRef
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{t: t, ctx: ctx, st: st, project: model.NewProjectID(), tpl: model.DigestFromSHA256([32]byte{1})}
	now := time.Now()
	must(t, st.CreateProject(ctx, model.Project{ID: f.project, Name: "p", CreatedAt: now}))
	must(t, st.PutTemplate(ctx, model.Template{Digest: f.tpl, Manifest: []byte("{}"), CreatedAt: now}))
	d, err := registry.Define(environment.NameRunc, runtime.Info{Name: "runc", Version: "1", Binary: "/usr/bin/runc", Isolation: environment.IsolationSharedKernel, OOMScope: environment.OOMKillsProcess}, registry.Inputs{})
	must(t, err)
	f.runc, err = d.Ref()
	must(t, err)
	canon, err := d.Canonical()
	must(t, err)
	_, err = st.PutEnvironment(ctx, store.EnvironmentRecord{Ref: f.runc, Name: environment.NameRunc, SchemaVersion: d.SchemaVersion, Definition: canon, FirstSeen: now})
	must(t, err)
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// nodeOpts describe one test node.
type nodeOpts struct {
	role     model.NodeRole
	slots    int
	labels   model.NodeLabels
	noEnv    bool
	template bool // reports the template
	canPull  bool
	pids     int // pids budget
}

func (f *fixture) node(o nodeOpts) model.NodeID {
	f.t.Helper()
	id, inc := model.NewNodeID(), model.NewIncarnation()
	if o.role == "" {
		o.role = model.RoleNode
	}
	_, err := f.st.RegisterNode(f.ctx, model.Node{ID: id, Incarnation: inc, Role: o.role, AdvertiseURL: "http://127.0.0.1:1",
		Slots: o.slots, MemoryMiB: 64 * 1024, CPUs: 8, PidsBudget: o.pids, Labels: o.labels, CanPull: o.canPull})
	must(f.t, err)
	if !o.noEnv {
		must(f.t, f.st.SetNodeEnvironments(f.ctx, id, []store.NodeEnvironment{{NodeID: id, Ref: f.runc, Enabled: true, Available: true, CheckedAt: time.Now()}}))
	}
	if o.template {
		must(f.t, f.st.SetNodeTemplates(f.ctx, store.Fence{Node: id, Incarnation: inc}, []model.TemplateDigest{f.tpl}))
	}
	return id
}

// fill places n sandboxes on node directly.
func (f *fixture) fill(node model.NodeID, n int) { f.fillPids(node, n, 0) }

// fillPids places n sandboxes of pids host pids each on node directly.
func (f *fixture) fillPids(node model.NodeID, n, pids int) {
	f.t.Helper()
	for range n {
		now := time.Now()
		res := model.DefaultResources()
		res.HostPids = pids
		sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: f.project, Template: f.tpl, Resources: res,
			State: model.StatePending, NodeID: node, CreatedAt: now, UpdatedAt: now}
		op := model.Operation{ID: model.NewOperationID(), ProjectID: f.project, SandboxID: sb.ID, Kind: model.OpCreate,
			State: model.OpPending, CreatedAt: now, UpdatedAt: now}
		must(f.t, f.st.CreateSandbox(f.ctx, sb, policy.Spec{}, op, nil))
	}
}

func (f *fixture) placer(strategy model.PlacementStrategy) *Placer {
	f.t.Helper()
	p, err := New(Config{Store: f.st, Strategy: strategy, DeadAfter: time.Hour})
	must(f.t, err)
	return p
}

func (f *fixture) request() Request {
	return Request{Environment: environment.Selector{Name: environment.NameRunc}, Template: f.tpl, Resources: model.DefaultResources()}
}

func TestSpreadAndPack(t *testing.T) {
	f := newFixture(t)
	busy := f.node(nodeOpts{slots: 10, template: true})
	idle := f.node(nodeOpts{slots: 10, template: true})
	f.fill(busy, 3)
	f.fill(idle, 1)
	for _, tc := range []struct {
		strategy model.PlacementStrategy
		want     model.NodeID
	}{
		{model.PlaceSpread, idle},
		{model.PlacePack, busy},
	} {
		d, err := f.placer(tc.strategy).Place(f.ctx, f.request())
		if err != nil || d.Node != tc.want || d.Environment != f.runc {
			t.Errorf("%s: placed %+v, %v; want %s in %s", tc.strategy, d, err, tc.want, f.runc)
		}
	}
	// Spread over an empty cluster fills the nodes in turn.
	g := newFixture(t)
	a, b := g.node(nodeOpts{slots: 4, template: true}), g.node(nodeOpts{slots: 4, template: true})
	got := map[model.NodeID]int{}
	for range 6 {
		d, err := g.placer(model.PlaceSpread).Place(g.ctx, g.request())
		must(t, err)
		g.fill(d.Node, 1)
		got[d.Node]++
	}
	if got[a] != 3 || got[b] != 3 {
		t.Fatalf("spread 6 over two nodes: %v", got)
	}
}

// TestFilters: each node lacks one thing; only the one that has all is
// picked, and without it the error says what each lacked.
func TestFilters(t *testing.T) {
	f := newFixture(t)
	f.node(nodeOpts{role: model.RoleAPI, template: true})                                // runs no sandboxes
	f.node(nodeOpts{noEnv: true, template: true, labels: model.NodeLabels{"zone": "a"}}) // no environment
	f.node(nodeOpts{labels: model.NodeLabels{"zone": "a"}})                              // no template, cannot pull
	f.node(nodeOpts{labels: model.NodeLabels{"zone": "b"}, template: true})              // wrong zone
	full := f.node(nodeOpts{slots: 1, labels: model.NodeLabels{"zone": "a"}, template: true})
	f.fill(full, 1)
	cordoned := f.node(nodeOpts{labels: model.NodeLabels{"zone": "a"}, template: true})
	_, err := f.st.SetNodeState(f.ctx, cordoned, model.NodeCordoned)
	must(t, err)

	req := f.request()
	req.Selector = model.NodeLabels{"zone": "a"}
	_, err = f.placer("").Place(f.ctx, req)
	if !errors.Is(err, ErrNoRoom) {
		t.Fatalf("only a full node fits: %v, want ErrNoRoom", err)
	}
	for _, want := range []string{"runs no sandboxes", "does not have the environment", "cannot pull", "labels do not match", "full", "cordoned"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	puller := f.node(nodeOpts{canPull: true, labels: model.NodeLabels{"zone": "a", "gpu": "no"}})
	d, err := f.placer("").Place(f.ctx, req)
	if err != nil || d.Node != puller {
		t.Fatalf("a node that can pull the template: %+v, %v; want %s", d, err, puller)
	}
	req.Exclude = []model.NodeID{puller}
	if _, err := f.placer("").Place(f.ctx, req); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("excluded: %v", err)
	}
	// An excluded node that matches otherwise lacks room, whatever it
	// shows: the only node left is not ErrNoNode (a 409 no_eligible_node
	// a client takes for good) but ErrNoRoom.
	req.Selector = model.NodeLabels{"gpu": "no"}
	if _, err := f.placer("").Place(f.ctx, req); !errors.Is(err, ErrNoRoom) || !contains(err.Error(), "refused the placement a moment ago") {
		t.Fatalf("the one matching node excluded: %v, want ErrNoRoom", err)
	}

	// Nothing fits but a full node: ErrNoRoom; nothing at all: ErrNoNode.
	req = f.request()
	req.Selector = model.NodeLabels{"zone": "nowhere"}
	if _, err := f.placer("").Place(f.ctx, req); !errors.Is(err, ErrNoNode) {
		t.Fatalf("no node matches: %v, want ErrNoNode", err)
	}
	req = f.request()
	req.Environment = environment.Selector{Name: environment.NameRunsc}
	if _, err := f.placer("").Place(f.ctx, req); !errors.Is(err, ErrUnknownEnvironment) {
		t.Fatalf("no node recorded runsc: %v, want ErrUnknownEnvironment", err)
	}
	req.Environment = environment.Selector{Ref: model.EnvironmentRef("env:sha256:" + strings.Repeat("0", 64))}
	if _, err := f.placer("").Place(f.ctx, req); !errors.Is(err, ErrUnknownEnvironment) {
		t.Fatalf("unknown reference: %v, want ErrUnknownEnvironment", err)
	}
}

// TestStaleAndDeadNodes: a node whose heartbeat is older than DeadAfter
// and a dead one are not placed on; a node's own templates count before
// they are reported (HasLocal).
func TestStaleAndDeadNodes(t *testing.T) {
	f := newFixture(t)
	self := f.node(nodeOpts{})
	p, err := New(Config{Store: f.st, DeadAfter: time.Hour, Self: self, HasLocal: func(d model.TemplateDigest) bool { return d == f.tpl }})
	must(t, err)
	if d, err := p.Place(f.ctx, f.request()); err != nil || d.Node != self {
		t.Fatalf("own template, not yet reported: %+v, %v", d, err)
	}
	time.Sleep(30 * time.Millisecond)
	stale, err := New(Config{Store: f.st, DeadAfter: 10 * time.Millisecond, Self: self, HasLocal: p.cfg.HasLocal})
	must(t, err)
	if _, err := stale.Place(f.ctx, f.request()); !errors.Is(err, ErrNoNode) || !contains(err.Error(), "no heartbeat") {
		t.Fatalf("stale heartbeat: %v", err)
	}
	if _, err := f.st.DeclareDeadNodes(f.ctx, 10*time.Millisecond, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Place(f.ctx, f.request()); !errors.Is(err, ErrNoNode) || !contains(err.Error(), "dead") {
		t.Fatalf("dead node: %v", err)
	}
}

// TestPidsBudget: a node whose pids budget the sandbox would exceed is full
// (ErrNoRoom, with the numbers), one whose whole budget is smaller than the
// sandbox's host pids cannot run it (ErrNoNode), and spread prefers the
// node with more of its budget left.
func TestPidsBudget(t *testing.T) {
	const runc256 = 1088
	for _, tc := range []struct {
		name  string
		nodes []nodeOpts
		used  []int // sandboxes of runc256 already on each node
		err   error
		want  int      // index of the node picked (err nil)
		says  []string // in the error
	}{
		{name: "fits", nodes: []nodeOpts{{pids: 2 * runc256}}, used: []int{1}, want: 0},
		{name: "full", nodes: []nodeOpts{{pids: 2*runc256 - 1}}, used: []int{1}, err: ErrNoRoom,
			says: []string{"full (pids 1088 + 1088 of 2175)"}},
		{name: "too small", nodes: []nodeOpts{{pids: runc256 - 1}}, used: []int{0}, err: ErrNoNode,
			says: []string{"pids: the sandbox may hold 1088 host tasks, but this node's pids budget is 1087"}},
		{name: "full and too small", nodes: []nodeOpts{{pids: runc256}, {pids: 1000}}, used: []int{1, 0}, err: ErrNoRoom,
			says: []string{"pids 1088 + 1088 of 1088", "pids budget is 1000"}},
		{name: "no budget bounds nothing", nodes: []nodeOpts{{}}, used: []int{50}, want: 0},
		// Memory alike (a sandbox each of 64 GiB): spread goes by pids.
		{name: "spread by pids left", nodes: []nodeOpts{{pids: 4 * runc256}, {pids: 4 * runc256}}, used: []int{2, 0}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var ids []model.NodeID
			for i, o := range tc.nodes {
				o.template = true
				ids = append(ids, f.node(o))
				f.fillPids(ids[i], tc.used[i], runc256)
			}
			req := f.request()
			req.Resources.HostPids = runc256
			for range 20 { // spread picks at random among nodes about as empty
				d, err := f.placer(model.PlaceSpread).Place(f.ctx, req)
				if tc.err != nil {
					if !errors.Is(err, tc.err) {
						t.Fatalf("placed %+v, %v; want %v", d, err, tc.err)
					}
					for _, s := range tc.says {
						if !contains(err.Error(), s) {
							t.Errorf("error %q does not say %q", err, s)
						}
					}
					return
				}
				if err != nil || d.Node != ids[tc.want] {
					t.Fatalf("placed %+v, %v; want node %d", d, err, tc.want)
				}
			}
		})
	}
}

func TestNewChecksConfig(t *testing.T) {
	f := newFixture(t)
	for _, cfg := range []Config{
		{Store: f.st},
		{DeadAfter: time.Second},
		{Store: f.st, DeadAfter: time.Second, Strategy: "random"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestPlaceAndCommitRefused: the one node that fits refuses the commit
// (store.ErrNodeFull: another create filled it meanwhile): the placement
// is tried again without it and ends in ErrNoRoom, the no_capacity a
// client retries, never ErrNoNode.
func TestPlaceAndCommitRefused(t *testing.T) {
	f := newFixture(t)
	only := f.node(nodeOpts{template: true})
	commits := 0
	err := PlaceAndCommit(f.ctx, f.placer(""), f.request(), func(d Decision) error {
		commits++
		if d.Node != only {
			t.Errorf("placed on %s, want %s", d.Node, only)
		}
		return fmt.Errorf("%w: node %s is full (memory)", store.ErrNodeFull, d.Node)
	})
	if !errors.Is(err, ErrNoRoom) || errors.Is(err, ErrNoNode) || commits != 1 {
		t.Fatalf("after the only node refused: %v (%d commits), want ErrNoRoom", err, commits)
	}
	// A commit that fails otherwise is returned as it is, tried once.
	boom := errors.New("boom")
	commits = 0
	if err := PlaceAndCommit(f.ctx, f.placer(""), f.request(), func(Decision) error { commits++; return boom }); !errors.Is(err, boom) || commits != 1 {
		t.Fatalf("other commit error: %v (%d commits)", err, commits)
	}
}
