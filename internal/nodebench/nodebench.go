// Package nodebench is `airlock bench nodes`: a scale simulation of
// several nodes sharing one PostgreSQL database. It runs the real store
// (internal/store/postgres), the real placement (internal/placement) and,
// for every simulated node, the real controller and worker over a runtime
// that only records what a real one would do (create and start are
// instant; the guest agent is an in-process HTTP/2 handler). A driver
// issues creates as the API does — placement.Place, then
// store.CreateSandbox with the sandbox's node and environment set, placed
// again elsewhere on store.ErrNodeFull — from concurrent clients, and
// measures placements and finished creates per second, their latencies and
// how evenly the sandboxes spread.
//
// Each step (one node count) runs in a fresh PostgreSQL schema of its own,
// dropped afterwards, so steps do not see each other's sandboxes and
// nothing the bench made is left behind.
package nodebench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockdev/airlock/internal/egress/policy"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/placement"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/store/postgres"
)

// Config configures a run.
type Config struct {
	// DatabaseURL is the PostgreSQL database to run in (each step in a
	// schema of its own, dropped afterwards).
	DatabaseURL string
	// Nodes are the node counts, one step each.
	Nodes []int
	// Creates per step, issued by Clients concurrent clients, spread over
	// Projects projects (creates of one project serialize on its quota
	// row).
	Creates, Clients, Projects int
	// Parallel is each node's controller's operation parallelism (the
	// controller's default is 4).
	Parallel int
	// Heartbeat is how often each node beats and sweeps for dead nodes;
	// DeadAfter the placement's and the sweep's liveness limit.
	Heartbeat, DeadAfter time.Duration
	// Timeout bounds the wait for a step's creates to finish after the
	// last was placed.
	Timeout time.Duration
	// PlacementCache is the placer's node-list cache TTL (0: none).
	PlacementCache time.Duration
	// Analyze is how often the step's tables are analyzed (0: never, left
	// to autovacuum). A long-lived database has planner statistics; a
	// step's fresh schema has none, and without them PostgreSQL plans the
	// claim for empty tables: it then scans every sandbox of the node for
	// each claim.
	Analyze  time.Duration
	Progress io.Writer // one line per step; nil for none
	Logger   *slog.Logger
}

// DefaultConfig is the configuration of `airlock bench nodes` without flags.
func DefaultConfig() Config {
	return Config{
		Nodes:     []int{1, 2, 5, 10, 20, 50},
		Creates:   3000,
		Clients:   32,
		Projects:  32,
		Parallel:  4,
		Heartbeat: 5 * time.Second,
		DeadAfter: 30 * time.Second,
		Timeout:   2 * time.Minute,
		Analyze:   time.Second,
	}
}

func (c Config) check() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("nodebench: a database URL is required")
	case len(c.Nodes) == 0:
		return errors.New("nodebench: at least one node count is required")
	case c.Creates < 1 || c.Clients < 1 || c.Projects < 1 || c.Parallel < 1:
		return errors.New("nodebench: creates, clients, projects and parallel must be at least 1")
	case c.Heartbeat <= 0 || c.DeadAfter <= 0 || c.Timeout <= 0 || c.PlacementCache < 0 || c.Analyze < 0:
		return errors.New("nodebench: heartbeat, dead-after and timeout must be positive, the placement cache and analyze period not negative")
	}
	for _, n := range c.Nodes {
		if n < 1 {
			return fmt.Errorf("nodebench: node count %d must be at least 1", n)
		}
	}
	return nil
}

// Sandbox resources of every create.
const sandboxMemoryMiB = 256

var sandboxResources = model.Resources{CPUs: 1, MemoryMiB: sandboxMemoryMiB, DiskMiB: 1024}

// Run runs every step and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rep := &Report{Creates: cfg.Creates, Clients: cfg.Clients, Projects: cfg.Projects, Parallel: cfg.Parallel, PlacementCache: cfg.PlacementCache, Analyze: cfg.Analyze}
	for _, n := range cfg.Nodes {
		st, err := runStep(ctx, cfg, n)
		if err != nil {
			return rep, fmt.Errorf("%d nodes: %w", n, err)
		}
		rep.Steps = append(rep.Steps, st)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%d nodes: %.0f placed/s, %.0f claimed/s\n", n, st.PlacedPerSec, st.ClaimedPerSec)
		}
	}
	return rep, nil
}

// runStep runs one step in a schema of its own and drops it.
func runStep(ctx context.Context, cfg Config, nodes int) (step Step, err error) {
	schema, dsn, err := createSchema(ctx, cfg.DatabaseURL)
	if err != nil {
		return Step{}, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := dropSchema(dctx, cfg.DatabaseURL, schema); derr != nil && err == nil {
			err = derr
		}
	}()
	// Two stores, as two kinds of processes would hold: the API's and
	// the nodes' (the simulated nodes share one pool and one listener).
	api, err := postgres.Open(ctx, dsn, cfg.Logger)
	if err != nil {
		return Step{}, err
	}
	defer api.Close()
	nodeStore, err := postgres.Open(ctx, dsn, cfg.Logger)
	if err != nil {
		return Step{}, err
	}
	defer nodeStore.Close()

	env, tpl, projects, err := seed(ctx, api, cfg.Projects)
	if err != nil {
		return Step{}, err
	}
	if cfg.Analyze > 0 {
		actx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			analyze(actx, dsn, cfg.Analyze, cfg.Logger)
		}()
		defer func() { stop(); <-done }()
	}
	tr := newTracker(cfg.Creates)
	setup := nodeSetup{store: nodeStore, env: env, template: tpl, tracker: tr, parallel: cfg.Parallel,
		heartbeat: cfg.Heartbeat, deadAfter: cfg.DeadAfter, logger: cfg.Logger}
	sims := make([]*simNode, 0, nodes)
	defer func() {
		for _, n := range sims {
			if serr := n.stop(); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	for i := range nodes {
		n, err := startNode(ctx, i, setup)
		if err != nil {
			return Step{}, err
		}
		sims = append(sims, n)
	}
	placer, err := placement.New(placement.Config{Store: api, DeadAfter: cfg.DeadAfter, NodeCache: cfg.PlacementCache})
	if err != nil {
		return Step{}, err
	}
	d := &driver{store: api, placer: placer, tracker: tr, projects: projects, template: tpl, creates: cfg.Creates}
	start := time.Now()
	if err := d.run(ctx, cfg.Clients); err != nil {
		return Step{}, err
	}
	if err := tr.wait(ctx, cfg.Timeout); err != nil {
		return Step{}, err
	}
	step = summarize(nodes, start, tr, d.retries.Load())
	step.Check, err = check(ctx, api, sims, cfg.Creates)
	return step, err
}

// seed records the environment, the template and the projects of a step.
func seed(ctx context.Context, st store.Store, projects int) (store.EnvironmentRecord, model.TemplateDigest, []model.ProjectID, error) {
	def := environment.Definition{
		SchemaVersion: environment.SchemaVersion,
		Name:          environment.NameRunc,
		Host:          environment.Platform{OS: "linux", Arch: "amd64"},
		Runtime: environment.RuntimeBinding{Name: string(environment.NameRunc), Version: "simulated",
			BinaryDigest: environment.Digest("sha256:" + strings.Repeat("0", 64))},
		Guest:     environment.Platform{OS: "linux", Arch: "amd64"},
		Isolation: environment.IsolationSharedKernel,
		Snapshot:  environment.Snapshot{Capability: environment.SnapshotNone},
		OOMScope:  environment.OOMKillsProcess,
	}
	canon, err := def.Canonical()
	if err != nil {
		return store.EnvironmentRecord{}, "", nil, fmt.Errorf("simulated environment: %w", err)
	}
	ref, err := def.Ref()
	if err != nil {
		return store.EnvironmentRecord{}, "", nil, fmt.Errorf("simulated environment: %w", err)
	}
	now := time.Now()
	env := store.EnvironmentRecord{Ref: ref, Name: def.Name, SchemaVersion: def.SchemaVersion, Definition: canon, FirstSeen: now}
	if _, err := st.PutEnvironment(ctx, env); err != nil {
		return store.EnvironmentRecord{}, "", nil, err
	}
	manifest := []byte(`{"simulated":true}`)
	tpl := model.DigestFromSHA256(sha256.Sum256(manifest))
	if err := st.PutTemplate(ctx, model.Template{Digest: tpl, SizeBytes: 1, Manifest: manifest, CreatedAt: now}); err != nil {
		return store.EnvironmentRecord{}, "", nil, err
	}
	ids := make([]model.ProjectID, projects)
	for i := range ids {
		ids[i] = model.NewProjectID()
		if err := st.CreateProject(ctx, model.Project{ID: ids[i], Name: fmt.Sprintf("bench-%d", i), CreatedAt: now}); err != nil {
			return store.EnvironmentRecord{}, "", nil, err
		}
	}
	return env, tpl, ids, nil
}

// driver issues creates as the API does.
type driver struct {
	store    store.Store
	placer   *placement.Placer
	tracker  *tracker
	projects []model.ProjectID
	template model.TemplateDigest
	creates  int

	next    atomic.Int64
	retries atomic.Int64 // placements the store refused (ErrNodeFull)
}

func (d *driver) run(ctx context.Context, clients int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := d.next.Add(1) - 1
				if i >= int64(d.creates) {
					return
				}
				if err := d.create(ctx, d.projects[int(i)%len(d.projects)]); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// create places and inserts one sandbox, placing it again elsewhere when
// the store refuses the node.
func (d *driver) create(ctx context.Context, project model.ProjectID) error {
	requested := time.Now()
	now := requested.UTC()
	sb := model.Sandbox{ID: model.NewSandboxID(), ProjectID: project, Template: d.template, Resources: sandboxResources,
		State: model.StatePending, CreatedAt: now, UpdatedAt: now, LastActivity: now}
	op := model.Operation{ID: model.NewOperationID(), ProjectID: project, SandboxID: sb.ID, Kind: model.OpCreate,
		State: model.OpPending, CreatedAt: now, UpdatedAt: now}
	d.tracker.requested(op.ID, requested)
	req := placement.Request{Environment: environment.Selector{Name: environment.NameRunc}, Template: d.template, Resources: sb.Resources}
	for attempt := 0; ; attempt++ {
		dec, err := d.placer.Place(ctx, req)
		if err != nil {
			return err
		}
		sb.NodeID, sb.Environment = dec.Node, dec.Environment
		err = d.store.CreateSandbox(ctx, sb, policy.Spec{}, op, nil)
		if errors.Is(err, store.ErrNodeFull) && attempt < 10 {
			d.retries.Add(1)
			req.Exclude = append(req.Exclude, dec.Node)
			continue
		}
		if err != nil {
			return err
		}
		d.tracker.placed(op.ID, dec.Node, time.Now())
		return nil
	}
}

// check compares what the store says with what the bench saw: every
// sandbox running on the node it was placed on, the node's usage counting
// it.
func check(ctx context.Context, st store.Store, sims []*simNode, creates int) (string, error) {
	running, usage := 0, 0
	for _, n := range sims {
		list, err := st.ListSandboxesOnNode(ctx, n.id)
		if err != nil {
			return "", err
		}
		for _, sb := range list {
			if sb.State == model.StateRunning && sb.NodeID == n.id {
				running++
			}
		}
		ns, err := st.GetNode(ctx, n.id)
		if err != nil {
			return "", err
		}
		usage += ns.Usage.Sandboxes
	}
	if running != creates || usage != creates {
		return "", fmt.Errorf("the store holds %d running sandboxes on the nodes (usage %d), want %d", running, usage, creates)
	}
	return "ok", nil
}

// analyze runs ANALYZE on the tables the claim and placement queries read
// every period until ctx ends, as autovacuum keeps a long-lived database's
// statistics current.
func analyze(ctx context.Context, dsn string, period time.Duration, logger *slog.Logger) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		logger.WarnContext(ctx, "analyze: connect", "err", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := conn.Exec(ctx, "ANALYZE sandboxes, operations, nodes"); err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "analyze", "err", err)
		}
	}
}

// createSchema creates a fresh schema and returns its name and a DSN whose
// sessions use it.
func createSchema(ctx context.Context, base string) (string, string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	schema := "airlock_bench_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", "", fmt.Errorf("nodebench: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("nodebench: create schema: %w", err)
	}
	dsn, err := withSearchPath(base, schema)
	if err != nil {
		return "", "", err
	}
	return schema, dsn, nil
}

// withSearchPath returns dsn (a URL or key=value string) with search_path
// set to schema.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("nodebench: database URL: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return dsn + " search_path=" + schema, nil
}

func dropSchema(ctx context.Context, base, schema string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("nodebench: connect to drop schema %s: %w", schema, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("nodebench: drop schema %s: %w", schema, err)
	}
	return nil
}
