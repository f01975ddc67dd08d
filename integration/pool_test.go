package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// TestWarmPool is the warm-pool path as an operator and a user take it: the
// admin sets a pool with `airlock pool set`; the node fills it; a matching
// create is served at once from the pool (201, running, source pool) with
// its own env and metadata applied; `airlock run` is served from it too;
// the pool refills; a create that matches no pool starts cold; the admin
// drains and removes the pool, and nothing of its sandboxes is left.
func TestWarmPool(t *testing.T) {
	airtest.RequireRoot(t)
	bins := build(t)
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			airtest.RequireBinary(t, rt)
			s := newServer(t, bins, serverConfig{runtime: rt, extraArgs: []string{"--pool-fill-parallel", "2"}})
			s.start()
			ctx := ctxFor(t, 4*time.Minute)
			c := s.client()
			var p apiv1.Pool
			s.cliJSON(ctx, &p, "pool", "set", "--template", "default", "--size", "2", "--memory-mib", "256")
			// Whatever happens, the pool's sandboxes go before the
			// harness checks for leftovers (its cleanup runs after this).
			t.Cleanup(func() { drainPool(t, c, p) })
			waitPool(ctx, t, c, p.ID, func(p apiv1.Pool) bool { return p.Ready == 2 })

			// Nothing of the pool is visible to the project.
			list, err := c.ListAllSandboxes(ctx, client.ListSandboxesQuery{States: model.AllSandboxStates()})
			if err != nil || len(list.Sandboxes) != 0 {
				t.Fatalf("the project sees %d sandboxes while the pool is filled (%v)", len(list.Sandboxes), err)
			}

			res, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{MemoryMiB: 256,
				Env: map[string]string{"GREETING": "from-the-pool"}, Metadata: map[string]string{"task": "t1"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Sandbox.State != "running" || res.Sandbox.Source != apiv1.SourcePool || res.Operation.State != "succeeded" {
				t.Fatalf("create with a filled pool: sandbox %+v, operation %+v", res.Sandbox, res.Operation)
			}
			id := model.SandboxID(res.Sandbox.ID)
			out := execIn(ctx, t, c, id, "sh", "-c", `echo "$GREETING" $(hostname)`)
			if out.stdout != "from-the-pool airlock\n" || out.exitCode != 0 {
				t.Fatalf("a claimed sandbox's env: %+v", out)
			}
			// A command's own env still wins over the sandbox's.
			own := execReq(ctx, t, c, id, apiv1.CreateCommandRequest{Args: []string{"sh", "-c", `echo "$GREETING"`}, Env: map[string]string{"GREETING": "own"}})
			if own.stdout != "own\n" {
				t.Fatalf("command env over sandbox env: %+v", own)
			}
			got, err := c.GetSandbox(ctx, id)
			if err != nil || got.Metadata["task"] != "t1" || got.Source != apiv1.SourcePool {
				t.Fatalf("claimed sandbox: %+v, %v", got, err)
			}

			// The CLI's run takes the same path (and deletes its sandbox).
			stdout, stderr, code := s.cli(ctx, "run", "--memory-mib", "256", "--", "echo", "hello")
			if code != 0 || stdout != "hello\n" {
				t.Fatalf("airlock run from the pool: exit %d, %q, %q", code, stdout, stderr)
			}
			waitPool(ctx, t, c, p.ID, func(p apiv1.Pool) bool { return p.Ready == 2 && p.Hits == 2 })

			// Other resources match no pool: a cold create.
			cold := createSandbox(ctx, t, c, apiv1.CreateSandboxRequest{MemoryMiB: 128})
			if cold.Source != apiv1.SourceCold {
				t.Fatalf("create matching no pool: source %q, want cold", cold.Source)
			}
			var pools apiv1.PoolList
			s.cliJSON(ctx, &pools, "pool", "list")
			if len(pools.Pools) != 1 || pools.Pools[0].Hits != 2 || pools.Pools[0].Misses != 0 {
				t.Fatalf("pool list: %+v", pools)
			}
			table, _, _ := s.cli(ctx, "pool", "list")
			if !strings.Contains(table, p.ID) || !strings.Contains(table, "READY") {
				t.Fatalf("pool list table:\n%s", table)
			}
			// Concurrent creates, more than the pool holds: every one
			// succeeds, no sandbox is handed out twice, the rest start
			// cold.
			waitPool(ctx, t, c, p.ID, func(p apiv1.Pool) bool { return p.Ready == 2 })
			const burst = 5
			type result struct {
				sb  apiv1.Sandbox
				err error
			}
			results := make(chan result, burst)
			for range burst {
				go func() {
					res, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{MemoryMiB: 256})
					if err == nil && res.Sandbox.Source != apiv1.SourcePool {
						_, err = c.WaitOperation(ctx, model.OperationID(res.Operation.ID))
					}
					results <- result{res.Sandbox, err}
				}()
			}
			toDelete := []model.SandboxID{id, model.SandboxID(cold.ID)}
			seen := map[string]bool{}
			fromPool := 0
			for range burst {
				r := <-results
				if r.err != nil {
					t.Errorf("concurrent create: %v", r.err)
					continue
				}
				if seen[r.sb.ID] {
					t.Errorf("sandbox %s handed out twice", r.sb.ID)
				}
				seen[r.sb.ID] = true
				toDelete = append(toDelete, model.SandboxID(r.sb.ID))
				if r.sb.Source == apiv1.SourcePool {
					fromPool++
				}
			}
			if fromPool < 1 || fromPool > burst {
				t.Errorf("%d of %d concurrent creates came from a pool of 2", fromPool, burst)
			}
			for _, del := range toDelete {
				if _, err := c.DeleteSandbox(ctx, del); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// waitPool polls the pool until ok holds.
func waitPool(ctx context.Context, t *testing.T, c *client.Client, id string, ok func(apiv1.Pool) bool) apiv1.Pool {
	t.Helper()
	var last apiv1.Pool
	for {
		l, err := c.ListPools(ctx)
		if err != nil {
			t.Fatalf("list pools: %v", err)
		}
		for _, p := range l.Pools {
			if p.ID == id {
				last = p
				if ok(p) {
					return p
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pool %s never reached the expected fill: last %+v", id, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drainPool sets the pool's size to 0, waits until its sandboxes are gone
// and removes it.
func drainPool(t *testing.T, c *client.Client, p apiv1.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.PutPool(ctx, apiv1.PutPoolRequest{Template: p.Template, Size: 0, Environment: p.Environment, CPUs: p.CPUs, MemoryMiB: p.MemoryMiB}); err != nil {
		t.Errorf("drain pool %s: %v", p.ID, err)
		return
	}
	waitPool(ctx, t, c, p.ID, func(p apiv1.Pool) bool { return p.Ready+p.Starting+p.Draining == 0 })
	if _, err := c.DeletePool(ctx, p.ID); err != nil {
		t.Errorf("remove pool %s: %v", p.ID, err)
	}
}

// TestWarmPoolEgress: a pool sandbox waits with no egress at all; the
// claim applies the claimant's policy to the live sandbox at once — a
// name it allows is reached, one it does not is refused — and a claim
// without a policy gets the server's default.
func TestWarmPoolEgress(t *testing.T) {
	airtest.RequireRoot(t)
	n := newFakenet(t)
	s := newEgressServer(t, build(t), "runc", n, "--egress-default", "public")
	ctx := ctxFor(t, 3*time.Minute)
	c := s.client()
	var p apiv1.Pool
	s.cliJSON(ctx, &p, "pool", "set", "--template", "default", "--size", "2")
	t.Cleanup(func() { drainPool(t, c, p) })
	waitPool(ctx, t, c, p.ID, func(p apiv1.Pool) bool { return p.Ready == 2 })

	claim := func(egress *apiv1.EgressPolicy) model.SandboxID {
		t.Helper()
		res, err := c.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Egress: egress})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.Source != apiv1.SourcePool {
			t.Fatalf("create: source %q, want a pool claim", res.Sandbox.Source)
		}
		t.Cleanup(func() { _, _ = c.DeleteSandbox(context.Background(), model.SandboxID(res.Sandbox.ID)) })
		return model.SandboxID(res.Sandbox.ID)
	}
	fetch := func(id model.SandboxID, name string) execResult {
		return execIn(ctx, t, c, id, "sh", "-c", wget+" http://"+name+"/")
	}
	const reached = "fakenet proto=http"

	strict := claim(&apiv1.EgressPolicy{Default: "none", Allow: []string{allowedName}})
	if out := fetch(strict, allowedName); !strings.Contains(out.stdout, reached) {
		t.Fatalf("claimed sandbox with %s allowed: %+v", allowedName, out)
	}
	if out := fetch(strict, "blocked.example"); strings.Contains(out.stdout, reached) || out.exitCode == 0 {
		t.Fatalf("claimed sandbox reached a name its policy does not allow: %+v", out)
	}
	open := claim(nil) // the server's default, public
	if out := fetch(open, allowedName); !strings.Contains(out.stdout, reached) {
		t.Fatalf("claimed sandbox on the public default: %+v", out)
	}
	if reqs := n.RequestsTo(blockedAddr); len(reqs) != 0 {
		t.Errorf("the fake internet saw requests to the blocked address: %+v", reqs)
	}
}
