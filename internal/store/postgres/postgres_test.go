package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pgtest"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/migrations"
	"github.com/airlockdev/airlock/internal/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, dsn string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, pgtest.DSN(t)) })
}

// TestConcurrentOpenMigratesOnce starts several servers' stores at once on
// an empty database: the advisory lock lets exactly one apply each version.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(context.Background(), dsn, nil)
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	var rows, versions int
	if err := stores[0].DB().QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&rows, &versions); err != nil {
		t.Fatal(err)
	}
	all, _ := migrations.Load()
	if rows != len(all) || versions != len(all) {
		t.Fatalf("schema_migrations has %d rows / %d versions, want %d", rows, versions, len(all))
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	if _, err := s.DB().Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dsn, nil)
	if !errors.Is(err, migrations.ErrTooNew) {
		t.Fatalf("Open of a newer schema: %v, want ErrTooNew", err)
	}
}

// seed creates a project and a template in s.
func seed(t *testing.T, s store.Store) (model.Project, model.Template) {
	t.Helper()
	ctx := context.Background()
	p := model.Project{ID: model.NewProjectID(), Name: "p-" + string(model.NewProjectID())[4:14], CreatedAt: time.Now()}
	if err := s.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	tpl := model.Template{Digest: model.DigestFromSHA256([32]byte{7}), Manifest: []byte("{}"), CreatedAt: time.Now()}
	if err := s.PutTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	return p, tpl
}

// registerNode registers a new node of role all with unbounded room.
func registerNode(t *testing.T, s store.Store) store.Fence {
	t.Helper()
	f := store.Fence{Node: model.NewNodeID(), Incarnation: model.NewIncarnation()}
	if _, err := s.RegisterNode(context.Background(), model.Node{ID: f.Node, Incarnation: f.Incarnation, Role: model.RoleAll,
		AdvertiseURL: "http://" + string(f.Node) + ".test:8080"}); err != nil {
		t.Fatal(err)
	}
	return f
}

// createSandbox creates a sandbox placed on node.
func createSandbox(t *testing.T, s store.Store, p model.Project, tpl model.Template, node model.NodeID) model.Operation {
	t.Helper()
	now := time.Now()
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: p.ID, Template: tpl.Digest,
		Resources: model.DefaultResources(), State: model.StatePending, NodeID: node, CreatedAt: now, UpdatedAt: now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: p.ID, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSandbox(context.Background(), sb, policy.Spec{}, op, nil); err != nil {
		t.Fatal(err)
	}
	return op
}

// TestCrossInstanceWatch: a change made through one Store (standing in for
// another server process) wakes the watchers of a second Store on the same
// database, through LISTEN/NOTIFY only.
func TestCrossInstanceWatch(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	p, tpl := seed(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := registerNode(t, b)
	wb := b.Watch(ctx)
	createSandbox(t, a, p, tpl, node.Node)
	storetest.WaitWake(t, wb, "change through the other store")

	// And a claim through b wakes a.
	wa := a.Watch(ctx)
	if _, err := b.ClaimOperation(context.Background(), store.Claim{Owner: node.Node, Incarnation: node.Incarnation, Lease: time.Minute, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	storetest.WaitWake(t, wa, "claim through the other store")
}

// TestCrossInstanceWatchNode: a change made through one Store wakes, in a
// second Store on the same database, the watch of the node it concerns and
// not another node's; a cluster-wide change wakes every node's watch, and
// so does a notification without a payload (as a process that sends none
// writes it). Through LISTEN/NOTIFY only.
func TestCrossInstanceWatchNode(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	p, tpl := seed(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodeA, nodeB := registerNode(t, a), registerNode(t, a)
	ws := storetest.Watchers{"A": b.WatchNode(ctx, nodeA.Node), "B": b.WatchNode(ctx, nodeB.Node), "builds": b.WatchBuilds(ctx), "all": b.Watch(ctx)}
	for _, step := range []struct {
		name string
		do   func()
		want []string
	}{
		{"create on A", func() { createSandbox(t, a, p, tpl, nodeA.Node) }, []string{"A", "all"}},
		{"create on B", func() { createSandbox(t, a, p, tpl, nodeB.Node) }, []string{"B", "all"}},
		{"claim by B", func() {
			if _, err := a.ClaimOperation(ctx, store.Claim{Owner: nodeB.Node, Incarnation: nodeB.Incarnation, Lease: time.Minute, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}, []string{"B", "all"}},
		{"unplaced create", func() { createSandbox(t, a, p, tpl, "") }, []string{"all"}},
		{"build queued", func() {
			if err := a.CreateBuild(ctx, model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildImport, Source: "/srv/x", CreatedAt: time.Now()}, nil); err != nil {
				t.Fatal(err)
			}
		}, []string{"builds", "all"}},
		{"pool set", func() {
			ref, _ := model.ParseTemplateRef("name:x")
			if _, err := a.PutPool(ctx, model.Pool{ID: model.NewPoolID(), Key: model.PoolKey{Template: ref, CPUs: 1, MemoryMiB: 256},
				Size: 1, CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}, []string{"A", "B", "builds", "all"}},
		{"notification without payload", func() {
			if _, err := a.DB().Exec(`SELECT pg_notify($1, '')`, Channel); err != nil {
				t.Fatal(err)
			}
		}, []string{"A", "B", "builds", "all"}},
	} {
		ws.Drain()
		step.do()
		ws.Expect(t, step.name, step.want...)
	}
}

// TestListenerReconnects kills the listener's backend; the Store reconnects
// and keeps waking watchers for other processes' changes.
func TestListenerReconnects(t *testing.T) {
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	p, tpl := seed(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wb := b.Watch(ctx)

	listenerPIDs := func() []int {
		rows, err := a.DB().Query(`SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND state = 'idle' AND query LIKE 'LISTEN%'`,
			ListenerApplicationName)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var pids []int
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		return pids
	}
	before := listenerPIDs()
	if len(before) != 2 {
		t.Fatalf("found %d listener backends, want 2 (one per store)", len(before))
	}
	if _, err := a.DB().Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, ListenerApplicationName); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		after := listenerPIDs()
		if len(after) == 2 && after[0] != before[0] && after[0] != before[1] && after[1] != before[0] && after[1] != before[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listeners did not reconnect: before %v, now %v", before, after)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The reconnect itself wakes watchers (notifications may have been lost).
	storetest.WaitWake(t, wb, "reconnect")
	time.Sleep(100 * time.Millisecond)
	for len(wb) > 0 {
		<-wb
	}
	createSandbox(t, a, p, tpl, "")
	storetest.WaitWake(t, wb, "change after reconnect")
}

// TestConcurrentClaimsAcrossStores: two Stores (two servers, one node
// each) claim from one queue at once, three workers each; every operation
// is claimed exactly once, by its sandbox's node.
func TestConcurrentClaimsAcrossStores(t *testing.T) {
	dsn := pgtest.DSN(t)
	stores := []*Store{open(t, dsn), open(t, dsn)}
	nodes := []store.Fence{registerNode(t, stores[0]), registerNode(t, stores[1])}
	p, tpl := seed(t, stores[0])
	const ops = 30
	nodeOf := map[model.OperationID]model.NodeID{}
	for i := 0; i < ops; i++ {
		op := createSandbox(t, stores[0], p, tpl, nodes[i%2].Node)
		nodeOf[op.ID] = nodes[i%2].Node
	}
	var (
		mu      sync.Mutex
		claimed = map[model.OperationID]int{}
		wg      sync.WaitGroup
	)
	now := time.Now()
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, owner := stores[w%2], nodes[w%2]
			for {
				op, err := s.ClaimOperation(context.Background(), store.Claim{Owner: owner.Node, Incarnation: owner.Incarnation, Lease: time.Minute, Now: now})
				if errors.Is(err, store.ErrNoWork) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if nodeOf[op.ID] != owner.Node {
					t.Errorf("operation %s of a sandbox on %q claimed by %s", op.ID, nodeOf[op.ID], owner.Node)
				}
				mu.Lock()
				claimed[op.ID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(claimed) != ops {
		t.Fatalf("claimed %d distinct operations, want %d", len(claimed), ops)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Fatalf("operation %s claimed %d times", id, n)
		}
	}
}

// TestDutyLeaseAcrossStores: two nodes, each with its own store on one
// database, ask for the cluster duties' lease at once, again and again:
// exactly one holds it each time, and it stays with that one.
func TestDutyLeaseAcrossStores(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	stores := []*Store{open(t, dsn), open(t, dsn)}
	fences := make([]store.Fence, len(stores))
	for i, s := range stores {
		n := model.Node{ID: model.NewNodeID(), Incarnation: model.NewIncarnation(), Role: model.RoleAll,
			AdvertiseURL: "http://127.0.0.1:1"}
		if _, err := s.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		fences[i] = store.Fence{Node: n.ID, Incarnation: n.Incarnation}
	}
	first := -1
	for round := range 20 {
		held := make([]bool, len(stores))
		errs := make([]error, len(stores))
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held[i], errs[i] = s.HoldDutyLease(ctx, "cluster-duties", fences[i], time.Minute)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if held[0] == held[1] {
			t.Fatalf("round %d: held %v; want exactly one holder", round, held)
		}
		holder := 0
		if held[1] {
			holder = 1
		}
		if first < 0 {
			first = holder
		} else if holder != first {
			t.Fatalf("round %d: the lease moved from node %d to %d before it expired", round, first, holder)
		}
	}
}
