// Package worker is the node-local executor: it turns a sandbox record into a
// running sandbox on this host's runtime, observes it, destroys it, and keeps
// one guest-agent client per sandbox for the data plane. Every method is
// idempotent so the controller can repeat it after a crash.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/guestops"
	"github.com/airlockdev/airlock/internal/metrics"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/tracing"
)

// ErrPermanent marks failures that retrying cannot fix (a missing template, an
// invalid spec). The controller fails the operation at once instead of retrying.
var ErrPermanent = errors.New("permanent failure")

// ErrStopped marks a step that failed after its point of no return: the
// sandbox no longer runs (a suspend that failed after the sandbox's
// checkpoint was taken or its container removed). Such a step is still
// worth retrying (a suspend finishes what an earlier attempt left), but a
// sandbox whose step failed for good is not running any more
// (model.Lifecycle.Stopped).
var ErrStopped = errors.New("the sandbox no longer runs")

// dialTimeout bounds one connection attempt to a guest agent. A new
// sandbox's agent listens within a second even on a loaded host.
const dialTimeout = 20 * time.Second

// Config configures a Worker.
type Config struct {
	Runtime runtime.Runtime
	// TemplateDir returns the host path of a template's read-only root
	// filesystem, or an error if the template is not present on this node.
	TemplateDir func(model.TemplateDigest) (string, error)
	// TemplateEnv returns a template's environment ("NAME=value", in
	// order; a later entry of a name wins), the base of its sandboxes'
	// environment. Nil: templates add none.
	TemplateEnv func(model.TemplateDigest) ([]string, error)
	// TemplateDefaults returns a template's defaults, whose start and
	// ready commands a sandbox starting afresh runs (startcmd.go). Nil:
	// templates start nothing.
	TemplateDefaults func(model.TemplateDigest) (template.Defaults, error)
	// FetchTemplate, if set, makes a template present on this node before
	// a sandbox is created from it: it pulls one that is missing from the
	// shared blob store. An error wrapping template.ErrNotFound or
	// template.ErrCorrupt is permanent; others (the blob store is
	// unreachable) are retried.
	FetchTemplate func(context.Context, model.TemplateDigest) error
	AgentBinary   string
	AgentWait     time.Duration // how long a new sandbox's agent may take to answer; default 60 s
	// Network, if set, gives every sandbox its network before the runtime
	// creates it and takes it away after the runtime deleted it. Nil:
	// sandboxes have loopback only.
	Network Network
	// Environment is the reference of the execution environment this
	// worker runs sandboxes in: recorded in the snapshots it writes, and a
	// snapshot of another environment is not restored here. Empty: not
	// known (snapshots are not checked).
	Environment model.EnvironmentRef
	// Volumes mounts the volumes of this node on the host (nil: sandboxes
	// that mount volumes fail to create).
	Volumes Volumes
	// SnapshotDir is where this worker's runtime writes saved snapshots,
	// one directory per snapshot ID (snapshots.go); "": none.
	SnapshotDir string
	// LookupSnapshot returns a saved snapshot's record, for a sandbox
	// created from it; nil: such sandboxes fail.
	LookupSnapshot func(context.Context, model.SnapshotID) (model.SnapshotRecord, error)
	// Blobs is the shared blob store saved snapshots are pushed to and
	// pulled from (snapblob.go); nil: snapshots stay on their node.
	Blobs blobstore.Store
	// Fault, if set, is called at named points of Ensure and Destroy so tests
	// can kill the process there (see internal/faults).
	Fault  func(point string)
	Logger *slog.Logger
	// Metrics counts failed runtime calls; nil: none.
	Metrics *metrics.Metrics
	// TracerProvider records the spans of the runtime calls and of the
	// guest agents' requests (trace.go); nil: not traced.
	TracerProvider trace.TracerProvider
}

// Network prepares and removes sandboxes' networks (in Airlock:
// sandboxnet's netns and veth, the nftables set and the egress registry).
// Both methods are idempotent: Attach returns the same network again (and
// repairs a half-made one), Detach of a sandbox without a network succeeds.
type Network interface {
	Attach(ctx context.Context, id model.SandboxID) (runtime.Network, error)
	Detach(ctx context.Context, id model.SandboxID) error
}

// Volumes mounts the node's volumes on the host (internal/volumedisk): the
// volume's filesystem (made the first time), whose data directory's host
// path it returns. It is idempotent.
type Volumes interface {
	Mount(ctx context.Context, id model.VolumeID, sizeMiB int) (string, error)
}

// CAEnv are the environment variables that point the common TLS stacks at
// the guest's trust store, which holds the deployment CA (Debian's bundle,
// to which the runtime appends the CA; Node.js adds the CA alone to its own
// store).
func CAEnv(bundle, caCert string) model.Env {
	return model.Env{
		"SSL_CERT_FILE":       bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"PIP_CERT":            bundle,
		"GIT_SSL_CAINFO":      bundle,
		"NODE_EXTRA_CA_CERTS": caCert,
	}
}

// Worker runs sandboxes on one node.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer // nil: not traced

	mu     sync.Mutex
	agents map[model.SandboxID]*agentclient.Client
	// gone remembers sandboxes destroyed recently, so that an attach that
	// raced their destruction cannot re-create an agent client nothing
	// would remove. Entries expire after goneTTL (by then the store says
	// the sandbox is deleted and nobody asks).
	gone map[model.SandboxID]time.Time
	// pullMu makes pulls of saved snapshots one at a time (snapblob.go).
	pullMu sync.Mutex
}

// goneTTL is how long a destroyed sandbox's ID is remembered.
const goneTTL = 10 * time.Minute

// New returns a Worker.
func New(cfg Config) (*Worker, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("worker: no runtime")
	}
	if cfg.TemplateDir == nil {
		return nil, errors.New("worker: no template resolver")
	}
	if cfg.AgentBinary == "" {
		return nil, errors.New("worker: no agent binary")
	}
	if cfg.AgentWait == 0 {
		cfg.AgentWait = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Fault == nil {
		cfg.Fault = func(string) {}
	}
	w := &Worker{cfg: cfg, log: cfg.Logger, tracer: tracing.Tracer(cfg.TracerProvider), agents: map[model.SandboxID]*agentclient.Client{}, gone: map[model.SandboxID]time.Time{}}
	// No pull runs yet: what a crash left of one goes.
	if err := w.removeStalePulls(); err != nil {
		return nil, err
	}
	return w, nil
}

// RuntimeInfo describes the runtime this worker drives.
func (w *Worker) RuntimeInfo() runtime.Info { return w.cfg.Runtime.Info() }

// Ensure makes the sandbox exist and run, starting from whatever state a
// previous (possibly crashed) attempt of its create left, and returns once
// its guest agent answers. A stopped sandbox is what a failed attempt of the
// create left (nothing in it is worth keeping) and is recreated; a paused
// one is alive and is resumed (its runtime must claim runtime.CapPause). A
// sandbox with a snapshot is never created from scratch: it is woken (Wake).
func (w *Worker) Ensure(ctx context.Context, sb model.Sandbox) error {
	if sb.Snapshot != nil {
		return fmt.Errorf("%w: sandbox %s has a snapshot: it is woken, not created again", ErrPermanent, sb.ID)
	}
	rt := w.cfg.Runtime
	st, err := rt.State(ctx, sb.ID)
	_ = w.rtErr("state", err)
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		spec, err := w.createSpec(ctx, sb)
		if err != nil {
			return err
		}
		if err := w.runtimeCreate(ctx, spec); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("observe sandbox %s: %w", sb.ID, err)
	case st.Phase == runtime.PhaseStopped:
		w.log.InfoContext(ctx, "recreating a sandbox a failed create attempt left stopped", "sandbox", sb.ID)
		if err := w.Destroy(ctx, sb.ID); err != nil {
			return err
		}
		spec, err := w.createSpec(ctx, sb)
		if err != nil {
			return err
		}
		if err := w.runtimeCreate(ctx, spec); err != nil {
			return err
		}
		st.Phase = runtime.PhaseCreated
	}
	if err := w.startAndWait(ctx, sb, st.Phase, "create"); err != nil {
		return err
	}
	// A paused sandbox was alive: its start command runs already. One
	// made from a snapshot with its memory continues the source's.
	if st.Phase == runtime.PhasePaused || sb.FromSnapshot != "" && !w.startsAfresh() {
		return nil
	}
	return w.startTemplate(ctx, sb)
}

// CreateSource says how Ensure got the sandbox running: restored from a
// base snapshot, or created and started (cold).
func (w *Worker) CreateSource(id model.SandboxID) model.Source {
	if sc, ok := w.cfg.Runtime.(runtime.SnapshotCreator); ok && sc.CreatedFromSnapshot(id) {
		return model.SourceSnapshot
	}
	return model.SourceCold
}

// startAndWait brings a sandbox the runtime has (in phase) to running and
// waits until its guest agent answers. step names the fault point after the
// start (step + ".after-start").
func (w *Worker) startAndWait(ctx context.Context, sb model.Sandbox, phase runtime.Phase, step string) error {
	rt := w.cfg.Runtime
	switch phase {
	case runtime.PhasePaused:
		// Alive, its memory resident: continue it, never recreate it.
		p, err := runtime.AsPauser(rt)
		if err != nil {
			return fmt.Errorf("%w: resume sandbox %s: %w", ErrPermanent, sb.ID, err)
		}
		if err := w.rtErr("resume", w.traceRuntime(ctx, "resume", sb.ID, func(ctx context.Context) error { return p.Resume(ctx, sb.ID) })); err != nil {
			return fmt.Errorf("resume sandbox %s: %w", sb.ID, err)
		}
	case runtime.PhaseRunning:
	default:
		if err := w.rtErr("start", w.traceRuntime(ctx, "start", sb.ID, func(ctx context.Context) error { return rt.Start(ctx, sb.ID) })); err != nil {
			return fmt.Errorf("start sandbox %s: %w", sb.ID, err)
		}
	}
	w.cfg.Fault(step + ".after-start")
	return w.waitAgent(ctx, sb.ID)
}

// waitAgent waits (at most AgentWait) until the sandbox's guest agent
// answers.
func (w *Worker) waitAgent(ctx context.Context, id model.SandboxID) error {
	waitCtx, cancel := context.WithTimeout(ctx, w.cfg.AgentWait)
	defer cancel()
	w.mu.Lock()
	delete(w.gone, id) // (re)created or woken after an earlier step dropped it
	w.mu.Unlock()
	agent, err := w.Agent(id)
	if err != nil {
		return err
	}
	if _, err := agent.Info(waitCtx); err != nil {
		var pe *agentclient.ProtocolError
		if errors.As(err, &pe) {
			return fmt.Errorf("%w: sandbox %s: %w", ErrPermanent, id, err)
		}
		return fmt.Errorf("sandbox %s: guest agent did not answer: %w", id, err)
	}
	return nil
}

// The inputs of a runtime.Spec are prepared by separate steps, each
// idempotent (it may run again after a crash): the template's tree on this
// node (rootFS), the sandbox's network (network) and its environment (env).

// createSpec is spec for a create: from the sandbox's saved snapshot if
// it has one.
func (w *Worker) createSpec(ctx context.Context, sb model.Sandbox) (runtime.Spec, error) {
	spec, err := w.spec(ctx, sb)
	if err != nil || sb.FromSnapshot == "" {
		return spec, err
	}
	if spec.From, err = w.from(ctx, sb); err != nil {
		return runtime.Spec{}, err
	}
	return spec, nil
}

// spec prepares every input of the sandbox's runtime.Spec.
func (w *Worker) spec(ctx context.Context, sb model.Sandbox) (runtime.Spec, error) {
	root, tplEnv, err := w.rootFS(ctx, sb)
	if err != nil {
		return runtime.Spec{}, err
	}
	network, err := w.network(ctx, sb)
	if err != nil {
		return runtime.Spec{}, err
	}
	var ca model.Env
	if network != nil && len(network.CACertPEM) > 0 {
		ca = CAEnv(runtime.GuestCABundle, runtime.GuestCACert)
	}
	env := sandboxEnvWith(tplEnv, ca, sb.Env)
	volumes, err := w.volumes(ctx, sb)
	if err != nil {
		return runtime.Spec{}, err
	}
	return runtime.Spec{
		Volumes:  volumes,
		ID:       sb.ID,
		RootFS:   root,
		Hostname: "airlock",
		Network:  network,
		Env:      env,
		Resources: runtime.Resources{
			CPUs:        sb.Resources.CPUs,
			MemoryBytes: int64(sb.Resources.MemoryMiB) << 20,
			DiskBytes:   int64(sb.Resources.DiskMiB) << 20,
			// Its workload's tasks: what admission charged its node's
			// pids budget for (environment.HostPids of this, which
			// the runtime sets on its host cgroup).
			PidsLimit: int64(model.GuestPids(sb.Resources.MemoryMiB)),
		},
		AgentBinary: w.cfg.AgentBinary,
		// Only the server sets this reserved key (a template build's).
		Build: sb.Metadata[model.BuildSandboxMetadata] != "",
	}, nil
}

// volumes mounts the sandbox's volumes on this node's host.
func (w *Worker) volumes(ctx context.Context, sb model.Sandbox) ([]runtime.VolumeMount, error) {
	if len(sb.VolumeMounts) == 0 {
		return nil, nil
	}
	if w.cfg.Volumes == nil {
		return nil, fmt.Errorf("%w: sandbox %s mounts volumes, and this node keeps none", ErrPermanent, sb.ID)
	}
	out := make([]runtime.VolumeMount, len(sb.VolumeMounts))
	for i, m := range sb.VolumeMounts {
		dir, err := w.cfg.Volumes.Mount(ctx, m.Volume, m.SizeMiB)
		if err != nil {
			return nil, fmt.Errorf("volume %s of sandbox %s: %w", m.Volume, sb.ID, err)
		}
		out[i] = runtime.VolumeMount{Source: dir, Target: m.Path}
	}
	return out, nil
}

// rootFS makes the sandbox's template present on this node and returns
// its root filesystem and environment.
func (w *Worker) rootFS(ctx context.Context, sb model.Sandbox) (runtime.RootFS, []string, error) {
	if w.cfg.FetchTemplate != nil {
		if err := w.cfg.FetchTemplate(ctx, sb.Template); err != nil {
			if errors.Is(err, template.ErrNotFound) || errors.Is(err, template.ErrCorrupt) || errors.Is(err, model.ErrInvalid) {
				return runtime.RootFS{}, nil, fmt.Errorf("%w: template %s: %w", ErrPermanent, sb.Template, err)
			}
			return runtime.RootFS{}, nil, fmt.Errorf("fetch template %s: %w", sb.Template, err)
		}
	}
	dir, err := w.cfg.TemplateDir(sb.Template)
	if err != nil {
		return runtime.RootFS{}, nil, fmt.Errorf("%w: template %s: %w", ErrPermanent, sb.Template, err)
	}
	var tplEnv []string
	if w.cfg.TemplateEnv != nil {
		if tplEnv, err = w.cfg.TemplateEnv(sb.Template); err != nil {
			return runtime.RootFS{}, nil, fmt.Errorf("%w: template %s: %w", ErrPermanent, sb.Template, err)
		}
	}
	return runtime.RootFS{Lower: dir}, tplEnv, nil
}

// network attaches the sandbox's network (nil without Config.Network).
func (w *Worker) network(ctx context.Context, sb model.Sandbox) (*runtime.Network, error) {
	if w.cfg.Network == nil {
		return nil, nil
	}
	w.cfg.Fault("create.before-network")
	n, err := w.cfg.Network.Attach(ctx, sb.ID)
	if err != nil {
		return nil, fmt.Errorf("network of sandbox %s: %w", sb.ID, err)
	}
	w.cfg.Fault("create.after-network")
	return &n, nil
}

// runtimeCreate creates the sandbox on the runtime. Ensure starts it right
// after, so the runtime may start it in the same step (spec.Start).
func (w *Worker) runtimeCreate(ctx context.Context, spec runtime.Spec) error {
	spec.Start = true
	w.cfg.Fault("create.before-runtime-create")
	if err := w.rtErr("create", w.traceRuntime(ctx, "create", spec.ID, func(ctx context.Context) error { return w.cfg.Runtime.Create(ctx, spec) })); err != nil {
		return fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	w.cfg.Fault("create.after-runtime-create")
	return nil
}

// SandboxEnv is the environment of a sandbox's guest agent, and so the base
// of every command's: the template's Env, with the sandbox's own Env
// replacing it name by name. (A command's Env in turn replaces both; the
// runtime adds PATH and HOME when neither sets them.)
func SandboxEnv(template []string, sandbox model.Env) model.Env {
	return sandboxEnvWith(template, nil, sandbox)
}

// sandboxEnvWith is SandboxEnv with between put between the template's Env and
// the sandbox's: CAEnv goes there (a template's own SSL_CERT_FILE would
// miss the deployment CA, and the sandbox's own still wins).
func sandboxEnvWith(template []string, between, sandbox model.Env) model.Env {
	env := make(model.Env, len(template)+len(between)+len(sandbox))
	for _, kv := range template {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	for k, v := range between {
		env[k] = v
	}
	for k, v := range sandbox {
		env[k] = v
	}
	return env
}

// Destroy removes every trace of the sandbox from this node. Destroying a
// sandbox that does not exist succeeds.
func (w *Worker) Destroy(ctx context.Context, id model.SandboxID) error {
	w.dropAgent(id)
	w.cfg.Fault("delete.before-runtime-delete")
	if err := w.rtErr("delete", w.traceRuntime(ctx, "delete", id, func(ctx context.Context) error { return w.cfg.Runtime.Delete(ctx, id) })); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	w.cfg.Fault("delete.after-runtime-delete")
	if w.cfg.Network != nil {
		if err := w.cfg.Network.Detach(ctx, id); err != nil {
			return fmt.Errorf("network of sandbox %s: %w", id, err)
		}
		w.cfg.Fault("delete.after-network-detach")
	}
	return nil
}

// Observe reports what the runtime sees of the sandbox. A sandbox in
// runtime.PhasePaused is alive (Phase.Alive): an observer must not fail or
// destroy it.
func (w *Worker) Observe(ctx context.Context, id model.SandboxID) (runtime.Status, error) {
	st, err := w.cfg.Runtime.State(ctx, id)
	return st, w.rtErr("state", err)
}

// List returns every sandbox the runtime knows on this node, including orphans.
func (w *Worker) List(ctx context.Context) ([]model.SandboxID, error) {
	ids, err := w.cfg.Runtime.List(ctx)
	return ids, w.rtErr("list", err)
}

// Agent returns the (cached) guest-agent client of a sandbox. It connects
// lazily and reconnects after a broken connection, so it also serves
// sandboxes adopted after a server restart. A sandbox destroyed in the last
// goneTTL gives an error matching guestops.ErrSandboxGone.
func (w *Worker) Agent(id model.SandboxID) (*agentclient.Client, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.agents[id]; ok {
		return c, nil
	}
	if _, ok := w.gone[id]; ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, guestops.ErrSandboxGone)
	}
	rt := w.cfg.Runtime
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		// Bounded: a guest that removed its agent's socket must not hold a
		// caller (or Close, which waits for a dial in progress) forever.
		ctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		return rt.DialAgent(ctx, id)
	}, w.log.With("sandbox", id), agentclient.WithTracerProvider(w.cfg.TracerProvider))
	w.agents[id] = c
	return c, nil
}

func (w *Worker) dropAgent(id model.SandboxID) {
	w.mu.Lock()
	c, ok := w.agents[id]
	delete(w.agents, id)
	now := time.Now()
	w.gone[id] = now
	for g, at := range w.gone {
		if now.Sub(at) > goneTTL {
			delete(w.gone, g)
		}
	}
	w.mu.Unlock()
	if ok {
		_ = c.Close()
	}
}

// Close closes every agent connection. Sandboxes keep running.
func (w *Worker) Close() error {
	w.mu.Lock()
	agents := w.agents
	w.agents = map[model.SandboxID]*agentclient.Client{}
	w.mu.Unlock()
	for _, c := range agents {
		_ = c.Close()
	}
	return nil
}
