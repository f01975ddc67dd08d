package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/environment/registry"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/worker"
)

// autoEnvironments are the environments the server may pick on its own
// (no --env, no --runtime), strongest isolation first. Shared-kernel ones
// (runc, crun) are never picked automatically: the operator must name them.
func autoEnvironments() []environment.Name { return []environment.Name{environment.NameRunsc} }

// environmentRuntime is the runtime of an enabled environment: a
// runtime.Runtime that may also hold something shared by its sandboxes (the
// OCI runtimes' agent filesystem), released when the server stops, and that
// says what else its environment's definition holds (a VM's boot inputs).
type environmentRuntime interface {
	runtime.Runtime
	// DefinitionInputs are the registry.Inputs of the runtime's environment
	// besides its binary's digest.
	DefinitionInputs() registry.Inputs
}

// agentFSReleaser is implemented by runtimes with a shared agent
// filesystem (oci).
type agentFSReleaser interface {
	ReleaseAgentFS(ctx context.Context) error
}

// enabledEnvironment is an enabled execution environment with its probed
// runtime.
type enabledEnvironment struct {
	local registry.Local
	rt    environmentRuntime
}

// enabledLocal describes an enabled environment whose runtime rt passed
// its probe: its definition (the binary hashed) and reference.
func enabledLocal(name environment.Name, rt environmentRuntime) (registry.Local, error) {
	info := rt.Info()
	l := registry.Local{Detection: registry.Detection{Name: name, Available: true}, Binary: info.Binary, Enabled: true}
	if fi, err := os.Stat(info.Binary); err == nil {
		l.BinaryInfo = fi // before the digest: unchanged since, it needs no second hash
	}
	d, err := registry.Define(name, info, rt.DefinitionInputs())
	if err != nil {
		return registry.Local{}, err
	}
	if l.Ref, err = d.Ref(); err != nil {
		return registry.Local{}, err
	}
	l.Definition = &d
	return l, nil
}

// ociSnapshotFormat is the format of the snapshots an OCI runtime writes
// ("" when it writes none): part of its environment's definition, since a
// snapshot is restored only by a runtime that reads its format.
func ociSnapshotFormat(info runtime.Info) string {
	switch runtime.SnapshotKindOf(info.Capabilities) {
	case model.SnapshotMemory:
		return oci.FormatRunscCheckpoint
	case model.SnapshotFilesystem:
		return oci.FormatUpper
	}
	return ""
}

// checkEnvironmentSet refuses sets the server cannot drive side by side.
func checkEnvironmentSet(names []environment.Name) error {
	if len(names) == 0 {
		return errors.New("no execution environment enabled")
	}
	seen := map[environment.Name]bool{}
	for _, n := range names {
		if seen[n] {
			return fmt.Errorf("--env %s: given twice", n)
		}
		seen[n] = true
	}
	// runc and crun sandboxes each get a host id range of the user
	// namespace pool; two runtimes would hand out the same ranges.
	if seen[environment.NameRunc] && seen[environment.NameCrun] {
		return errors.New("--env runc and --env crun cannot be enabled together: both would hand out the same user namespace id ranges (--userns-base); run a server of its own, with a pool of its own, for the other")
	}
	return nil
}

// openEnvironments makes and probes the runtime of every environment
// named (the first is the default). Each must work: an operator who names
// an environment wants it. With none named it picks the strongest
// automatic one that works, and says which.
func openEnvironments(ctx context.Context, names []environment.Name, rts runtimes, log *slog.Logger) ([]enabledEnvironment, error) {
	if len(names) == 0 {
		var errs []error
		for _, n := range autoEnvironments() {
			rt, err := rts.open(ctx, n)
			if err != nil {
				log.Info("execution environment unavailable", "env", n, "err", err)
				errs = append(errs, fmt.Errorf("%s: %w", n, err))
				continue
			}
			info := rt.Info()
			log.Info("picked the strongest execution environment that works on this host", "env", n, "runtime", info.Name, "version", info.Version, "isolation", info.Isolation, "capabilities", info.Capabilities)
			l, err := enabledLocal(n, rt)
			if err != nil {
				releaseAgentFS(context.WithoutCancel(ctx), rt, log)
				return nil, fmt.Errorf("execution environment %s: %w", n, err)
			}
			return []enabledEnvironment{{local: l, rt: rt}}, nil
		}
		return nil, fmt.Errorf("no execution environment with isolation stronger than shared-kernel works on this host (%w); install gVisor runsc, or pass --env crun or --env runc to accept shared-kernel isolation", errors.Join(errs...))
	}
	if err := checkEnvironmentSet(names); err != nil {
		return nil, err
	}
	out := make([]enabledEnvironment, 0, len(names))
	for _, n := range names {
		rt, err := rts.open(ctx, n)
		if err != nil {
			if rt != nil {
				out = append(out, enabledEnvironment{rt: rt})
			}
			for _, e := range out { // leave no mount of a server that did not start
				releaseAgentFS(context.WithoutCancel(ctx), e.rt, log)
			}
			return nil, fmt.Errorf("execution environment %s does not work on this host: %w", n, err)
		}
		info := rt.Info()
		log.Info("using the requested execution environment", "env", n, "runtime", info.Name, "version", info.Version, "isolation", info.Isolation, "capabilities", info.Capabilities)
		l, err := enabledLocal(n, rt)
		if err != nil {
			for _, e := range append(out, enabledEnvironment{rt: rt}) {
				releaseAgentFS(context.WithoutCancel(ctx), e.rt, log)
			}
			return nil, fmt.Errorf("execution environment %s: %w", n, err)
		}
		out = append(out, enabledEnvironment{local: l, rt: rt})
	}
	return out, nil
}

// detectOthers probes the installed environments that are not enabled
// (registry.Detect), so that the node records what works here besides what it
// runs. A probe leaves nothing behind (its runtime's shared agent
// filesystem is released again unless sandboxes of an earlier run use it).
// An environment that would share the user namespace pool with an enabled
// one is not probed (its probe's container would take a range in use).
func detectOthers(ctx context.Context, enabled []environment.Name, rts runtimes, log *slog.Logger) []registry.Local {
	var others []environment.Name
	for _, n := range environment.Names() {
		if slices.Contains(enabled, n) || !n.IsOCI() {
			// A VM environment is probed only when enabled: its probe
			// fetches a kernel and boots a VM.
			continue
		}
		if _, err := exec.LookPath(string(n)); err != nil {
			log.Debug("execution environment not installed", "env", n, "err", err)
			continue
		}
		others = append(others, n)
	}
	probe := func(ctx context.Context, n environment.Name) (runtime.Info, registry.Inputs, error) {
		if (n == environment.NameRunc && slices.Contains(enabled, environment.NameCrun)) || (n == environment.NameCrun && slices.Contains(enabled, environment.NameRunc)) {
			rt, err := oci.New(rts.config(n))
			if err != nil {
				return runtime.Info{}, registry.Inputs{}, err
			}
			return rt.Info(), registry.Inputs{SnapshotFormat: ociSnapshotFormat(rt.Info())}, errors.New("not probed: it would share the user namespace id pool with an enabled environment")
		}
		rt, err := rts.openOCI(ctx, n)
		if rt == nil {
			return runtime.Info{}, registry.Inputs{}, err
		}
		if rerr := rt.ReleaseAgentFS(context.WithoutCancel(ctx)); rerr != nil {
			log.Debug("the shared agent filesystem stays mounted", "env", n, "reason", rerr)
		}
		return rt.Info(), registry.Inputs{SnapshotFormat: ociSnapshotFormat(rt.Info())}, err
	}
	dets, err := registry.Detect(ctx, others, probe)
	if err != nil {
		log.Warn("detection of the environments that are not enabled stopped", "err", err)
		return nil
	}
	out := make([]registry.Local, 0, len(dets))
	for _, d := range dets {
		log.Info("detected an execution environment that is not enabled", "env", d.Name, "available", d.Available, "reason", d.Reason)
		out = append(out, registry.Local{Detection: d}) // not enabled: Resolve never verifies its binary
	}
	return out
}

// newWorkers makes one worker per enabled environment (base is every
// worker's configuration but its runtime and logger) and the set that
// routes sandboxes to them, the default first.
func newWorkers(environments []enabledEnvironment, base worker.Config, st store.Store, log *slog.Logger) (*worker.Set, error) {
	var list []worker.Environment
	for _, e := range environments {
		cfg := base
		cfg.Runtime = e.rt
		cfg.Environment = e.local.Ref // its snapshots record it; another's are not restored here
		if cfg.SnapshotDir != "" {
			cfg.SnapshotDir = filepath.Join(cfg.SnapshotDir, string(e.local.Name))
		}
		cfg.Logger = log.With("component", "worker", "env", e.local.Name)
		w, err := worker.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("worker of %s: %w", e.local.Name, err)
		}
		list = append(list, worker.Environment{Name: e.local.Name, Ref: e.local.Ref, Worker: w})
	}
	return worker.NewSet(list, st.GetSandboxByID)
}

// recordEnvironments makes the node's environment registry and records
// what it detected: the enabled environments and, probed here before the
// server serves (under a second on this host; a crash cannot interrupt a
// probe half-way then), the installed ones that are not enabled.
func recordEnvironments(ctx context.Context, environments []enabledEnvironment, st store.Store, node model.NodeID, rts runtimes, log *slog.Logger) (*registry.Registry, error) {
	locals := make([]registry.Local, 0, len(environment.Names()))
	enabled := make([]environment.Name, 0, len(environments))
	for _, e := range environments {
		locals = append(locals, e.local)
		enabled = append(enabled, e.local.Name)
	}
	locals = append(locals, detectOthers(ctx, enabled, rts, log)...)
	reg, err := registry.New(registry.Config{Store: st, NodeID: node, Environments: locals, Default: enabled[0]})
	if err != nil {
		return nil, err
	}
	if err := reg.Record(ctx); err != nil {
		return nil, err
	}
	// (The digest cache needs no seeding: each Local carries the binary's
	// stat from before its definition hashed it, so the first create's
	// check is a stat.)
	for _, e := range environments {
		log.Info("execution environment enabled", "env", e.local.Name, "ref", e.local.Ref, "default", e.local.Name == enabled[0])
	}
	return reg, nil
}

func environmentNames(environments []enabledEnvironment) []environment.Name {
	out := make([]environment.Name, 0, len(environments))
	for _, e := range environments {
		out = append(out, e.local.Name)
	}
	return out
}
