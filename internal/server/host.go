package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/controller"
	"github.com/airlockdev/airlock/internal/egress"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/guestops/agentguest"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/runtime/qemu"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/build"
	"github.com/airlockdev/airlock/internal/template/distribute"
	"github.com/airlockdev/airlock/internal/volumedisk"
	"github.com/airlockdev/airlock/internal/worker"
)

// host is what a process that runs sandboxes (role all or node) has
// besides the API: the template builds, the probed runtimes of its
// execution environments and their registry, the sandboxes' network and
// egress, and the workers. Its methods take a nil host (an api replica)
// and answer for one that runs nothing.
type host struct {
	builds    *build.Runner
	buildSbx  *buildSandboxes // the sandboxes of the builds' run steps
	enabled   []enabledEnvironment
	registry  environments
	egressNet *egressNet
	egressSvc *egressServices
	workers   *worker.Set
	volumes   *volumedisk.Manager
	capacity  model.NodeCapacity // what one sandbox may ask for here
	metrics   *metrics.Metrics
	tp        trace.TracerProvider
}

// openHost prepares everything that runs sandboxes on this node. The
// sandboxes' network is reconciled before anything drives them: what a
// crash left of deleted sandboxes goes, live ones are registered again.
func openHost(ctx context.Context, opts Options, dd *dataDir, st store.Store, templates *template.Store, dist *distribute.Distributor,
	nodeID model.NodeID, egressCfg egressConfig, secretSrc *secretSource, fault func(string), m *metrics.Metrics, log *slog.Logger) (_ *host, err error) {
	h := &host{metrics: m, tp: opts.TracerProvider}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	h.buildSbx = &buildSandboxes{why: "this server runs no sandboxes", log: log.With("component", "build-sandboxes")}
	if h.builds, err = startBuilds(ctx, opts, dd, st, templates, dist, nodeID, h.buildSbx, log); err != nil {
		return nil, err
	}
	publishDefault(ctx, st, dist, log)

	agentBin, err := findAgentBinary(opts.AgentBinary)
	if err != nil {
		return nil, err
	}
	if err := checkStaticAgent(agentBin); err != nil {
		return nil, err
	}
	sandboxDir, err := resolveSandboxDir(opts.SandboxDir)
	if err != nil {
		return nil, err
	}
	rts := runtimes{ids: runtime.IDPool{Base: opts.UsernsBase, Count: opts.UsernsRanges}, vmIDs: runtime.IDPool{Base: opts.VMUIDBase, Count: opts.VMUIDCount}, dd: dd, sandboxDir: sandboxDir, guestbootDir: opts.GuestbootDir, agentBin: agentBin, log: log}
	if h.enabled, err = openEnvironments(ctx, opts.Environments, rts, log); err != nil {
		return nil, err
	}
	if h.registry, err = recordEnvironments(ctx, h.enabled, st, nodeID, rts, log.With("component", "environments")); err != nil {
		return nil, err
	}
	h.buildSbx.choose(h.enabled, h.registry.Default())
	if h.egressNet, h.egressSvc, err = openEgress(egressCfg, dd, st, secretSrc, m.EgressObserver(), log.With("component", "egress")); err != nil {
		return nil, err
	}
	if err := reconcileEgress(ctx, h.egressNet, st, nodeID); err != nil {
		return nil, err
	}
	if h.volumes, err = openVolumes(dd, sandboxDir, log.With("component", "volumes")); err != nil {
		return nil, err
	}
	if err := reconcileVolumes(ctx, h.volumes, st, nodeID, log.With("component", "volumes")); err != nil {
		return nil, err
	}
	h.workers, err = newWorkers(h.enabled, worker.Config{
		Network: h.egressNet,
		Volumes: h.volumes,
		TemplateDir: func(d model.TemplateDigest) (string, error) {
			if !templates.Has(d) {
				return "", fmt.Errorf("template %s is not present on this node", d)
			}
			return templates.RootfsDir(d), nil
		},
		TemplateEnv: func(d model.TemplateDigest) ([]string, error) {
			def, err := templates.Defaults(d)
			return def.Config.Env, err
		},
		TemplateDefaults: templates.Defaults,
		FetchTemplate:    fetchTemplate(templates, dist),
		// One directory per environment below it (newWorkers).
		SnapshotDir: dd.join("snapshots"),
		LookupSnapshot: func(ctx context.Context, id model.SnapshotID) (model.SnapshotRecord, error) {
			return st.GetSnapshotByID(ctx, id)
		},
		Blobs:       snapshotBlobs(dist),
		AgentBinary: agentBin,
		Fault:       fault,
		Metrics:     m,
		// Spans of the runtime calls and the agents' requests.
		TracerProvider: opts.TracerProvider,
	}, st, log)
	if err != nil {
		return nil, err
	}
	overcommit := opts.MemoryOvercommit
	if overcommit <= 0 {
		overcommit = DefaultMemoryOvercommit
	}
	if h.capacity, err = nodeCapacity(overcommit); err != nil {
		return nil, err
	}
	h.capacity.DiskMiB = opts.MaxDiskMiB
	if h.capacity.DiskMiB <= 0 {
		h.capacity.DiskMiB = DefaultMaxDiskMiB
	}
	if h.capacity.Pids, err = pidsBudget(opts.PidsBudget, procSysKernel, log); err != nil {
		return nil, err
	}
	return h, nil
}

// describe fills in what the node record says about this host.
func (h *host) describe(n *model.Node, opts Options) {
	n.CPUs, n.MemoryMiB, n.PidsBudget = h.capacity.CPUs, h.capacity.MemoryMiB, h.capacity.Pids
	n.CanPull = opts.BlobStore != ""
}

// controller makes the node's controller, its leases fenced by the
// membership's incarnation and timed by the database's clock.
func (h *host) controller(st store.Store, m *membership, log *slog.Logger) (*controller.Controller, error) {
	return controller.New(controller.Config{
		Store:       st,
		Workers:     h.workers,
		NodeID:      m.node.ID,
		Incarnation: m.node.Incarnation,
		Now:         m.Now,
		Logger:      log.With("component", "controller"),
		Metrics:     h.metrics,
		// The span of each operation attempt.
		TracerProvider: h.tp,
	})
}

// components are the controller, the egress services and the template
// builds.
func (h *host) components(ctrl *controller.Controller, log *slog.Logger) []component {
	comps := []component{{name: "controller", run: func(ctx context.Context) error {
		if err := ctrl.Run(ctx); err != nil {
			return fmt.Errorf("controller: %w", err)
		}
		return nil
	}}}
	comps = append(comps, egressComponents(h.egressNet, h.egressSvc, log.With("component", "egress"))...)
	return append(comps, component{name: "template builds", run: func(ctx context.Context) error {
		if err := h.builds.Run(ctx); err != nil {
			return fmt.Errorf("template builds: %w", err)
		}
		return nil
	}})
}

// environments is the server's view of the environments and the default's
// name: this node's registry, or, for an api replica, what the nodes
// recorded (the default named by the first --env, else runsc).
func (h *host) environments(st store.Store, opts Options) (environments, environment.Name) {
	if h != nil {
		return h.registry, h.registry.Default()
	}
	def := environment.NameRunsc
	if len(opts.Environments) > 0 {
		def = opts.Environments[0]
	}
	return clusterEnvironments{st: st, def: def}, def
}

func (h *host) enabledEnvironments() []enabledEnvironment {
	if h == nil {
		return nil
	}
	return h.enabled
}

// runtimeInfos are what the API asks about each runtime's lifecycle
// support: this node's runtimes, or, for an api replica, every OCI flavor
// (a sandbox is matched by the name of the runtime that hosts it).
func (h *host) runtimeInfos() []infoer {
	if h != nil {
		return environmentRuntimes(h.enabled)
	}
	out := []infoer{staticInfo{Name: qemu.Name, Capabilities: qemu.Capabilities()}}
	for _, n := range environment.Names() {
		if f, err := oci.ParseFlavor(string(n)); err == nil {
			out = append(out, flavorInfo(f))
		}
	}
	return out
}

func (h *host) egressRegistry() *egress.Registry {
	if h == nil {
		return nil
	}
	return h.egressNet.Registry()
}

// wireBuildSandboxes gives the build sandboxes what they make sandboxes
// and run commands with, once the API exists.
// The build sandboxes a previous run of this node left are deleted first.
func (h *host) wireBuildSandboxes(ctx context.Context, svc *sandboxes.Service, st store.Store, inproc *api.InProcess, selfURL string, node model.NodeID) error {
	if h == nil {
		return nil
	}
	if err := reapOrphans(ctx, st, svc, node, h.buildSbx.log); err != nil {
		return err
	}
	return h.buildSbx.wire(svc, st, inproc, selfURL)
}

func (h *host) buildRunner() *build.Runner {
	if h == nil {
		return nil
	}
	return h.builds
}

// agents reaches the agents of the sandboxes hosted here; an api replica
// hosts none.
func (h *host) agents() agentguest.Agents {
	if h == nil {
		return noAgents{}
	}
	return h.workers
}

// close releases what openHost made if the server does not run.
func (h *host) close() {
	if h == nil {
		return
	}
	if h.workers != nil {
		h.workers.Close()
	}
	if h.egressSvc != nil {
		h.egressSvc.close() // no-op once served
	}
	if h.egressNet != nil {
		h.egressNet.claim.Close()
	}
}

// release unmounts what the runtimes share and gives the network back
// when the server stops.
func (h *host) release(ctx context.Context, log *slog.Logger) {
	if h == nil {
		return
	}
	for _, e := range h.enabled {
		releaseAgentFS(ctx, e.rt, log)
	}
	if h.egressNet != nil {
		h.egressNet.release(log)
	}
}

// noAgents is an api replica's: no sandbox's agent is here.
type noAgents struct{}

func (noAgents) Agent(id model.SandboxID) (*agentclient.Client, error) {
	return nil, fmt.Errorf("%w: sandbox %s is hosted by a node, not by this api replica", guestops.ErrSandboxGone, id)
}

// checkSharedStore refuses roles that need a shared database without one:
// SQLite is one node's embedded store.
func checkSharedStore(role model.NodeRole, databaseURL string) error {
	if databaseURL == "" && role != model.RoleAll {
		return errors.New("--role " + string(role) + " needs --database-url (PostgreSQL): the embedded SQLite store serves one node, which runs both the API and sandboxes (--role all)")
	}
	return nil
}
