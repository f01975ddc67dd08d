package placement_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/pgtest"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Racing creates on nodes of few slots never overfill one, with or without
// the placer's node cache: the store checks the room again, the caller
// places a refused sandbox elsewhere, and creates beyond every node's room
// are refused with ErrNoRoom.
func TestRacingCreatesNeverOverfillANode(t *testing.T) {
	for _, cache := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("cache=%s", cache), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := postgres.Open(ctx, pgtest.DSN(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			env, tpl, project := seed(t, ctx, st)
			const nodes, slots, creates = 3, 4, 20
			for i := range nodes {
				id := model.NewNodeID()
				inc := model.NewIncarnation()
				if _, err := st.RegisterNode(ctx, model.Node{ID: id, Incarnation: inc, Role: model.RoleNode,
					AdvertiseURL: fmt.Sprintf("http://n%d.invalid", i), Slots: slots, CPUs: 8, MemoryMiB: 1 << 20, CanPull: true}); err != nil {
					t.Fatal(err)
				}
				if err := st.SetNodeEnvironments(ctx, id, []store.NodeEnvironment{{NodeID: id, Ref: env, Enabled: true, Available: true, CheckedAt: time.Now()}}); err != nil {
					t.Fatal(err)
				}
			}
			p, err := placement.New(placement.Config{Store: st, DeadAfter: time.Minute, NodeCache: cache})
			if err != nil {
				t.Fatal(err)
			}
			var placed, noRoom atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, creates)
			for range creates {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := create(ctx, st, p, project, tpl)
					switch {
					case err == nil:
						placed.Add(1)
					case errors.Is(err, placement.ErrNoRoom) || errors.Is(err, placement.ErrNoNode): // every node refused it (excluded) or is full
						noRoom.Add(1)
					default:
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if placed.Load() != nodes*slots || noRoom.Load() != creates-nodes*slots {
				t.Errorf("%d placed and %d refused for lack of room; want %d and %d", placed.Load(), noRoom.Load(), nodes*slots, creates-nodes*slots)
			}
			list, err := st.ListNodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range list {
				if n.Usage.Sandboxes != slots {
					t.Errorf("node %s holds %d sandboxes, want %d", n.ID, n.Usage.Sandboxes, slots)
				}
			}
		})
	}
}

// create places and inserts one sandbox as the API does.
func create(ctx context.Context, st store.Store, p *placement.Placer, project model.ProjectID, tpl model.TemplateDigest) error {
	now := time.Now().UTC()
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: project, Template: tpl,
		Resources: model.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 1024}, State: model.StatePending, CreatedAt: now, UpdatedAt: now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: project, SandboxID: sb.ID, Kind: model.OpCreate, State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	req := placement.Request{Environment: environment.Selector{Name: environment.NameRunc}, Template: tpl, Resources: sb.Resources}
	for {
		d, err := p.Place(ctx, req)
		if err != nil {
			return err
		}
		sb.NodeID, sb.Environment = d.Node, d.Environment
		err = st.CreateSandbox(ctx, sb, policy.Spec{}, op, nil)
		if !errors.Is(err, store.ErrNodeFull) {
			return err
		}
		req.Exclude = append(req.Exclude, d.Node)
	}
}

func seed(t *testing.T, ctx context.Context, st store.Store) (model.EnvironmentRef, model.TemplateDigest, model.ProjectID) {
	t.Helper()
	def := environment.Definition{SchemaVersion: environment.SchemaVersion, Name: environment.NameRunc,
		Host:    environment.Platform{OS: "linux", Arch: "amd64"},
		Runtime: environment.RuntimeBinding{Name: "runc", Version: "test", BinaryDigest: environment.Digest("sha256:" + strings.Repeat("1", 64))},
		Guest:   environment.Platform{OS: "linux", Arch: "amd64"}, Isolation: environment.IsolationSharedKernel,
		Snapshot: environment.Snapshot{Capability: environment.SnapshotNone}, OOMScope: environment.OOMKillsProcess}
	canon, err := def.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := def.Ref()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutEnvironment(ctx, store.EnvironmentRecord{Ref: ref, Name: def.Name, SchemaVersion: def.SchemaVersion, Definition: canon, FirstSeen: time.Now()}); err != nil {
		t.Fatal(err)
	}
	manifest := []byte(`{"test":true}`)
	tpl := model.DigestFromSHA256(sha256.Sum256(manifest))
	if err := st.PutTemplate(ctx, model.Template{Digest: tpl, SizeBytes: 1, Manifest: manifest, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	project := model.NewProjectID()
	if err := st.CreateProject(ctx, model.Project{ID: project, Name: "p", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return ref, tpl, project
}
