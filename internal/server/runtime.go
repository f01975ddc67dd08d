package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// autoCandidates are the runtimes the server may pick on its own, strongest
// isolation first. Shared-kernel runtimes (runc, crun) are never picked
// automatically: the operator must ask for them.
func autoCandidates() []string { return []string{"runsc"} }

// selectRuntime returns the runtime the operator asked for, or the strongest
// one that works on this host, after proving it works by running a probe.
// It returns the concrete *oci.Runtime: what differs between runtimes is
// asked of Info().Capabilities, and the server's own housekeeping of the
// OCI runtime (ReleaseAgentFS) needs no discovery.
func selectRuntime(ctx context.Context, name string, ids oci.IDPool, dd *dataDir, sandboxDir, agentBin string, log *slog.Logger) (*oci.Runtime, error) {
	cfgFor := func(flavor string) oci.Config {
		stateRoot := dd.join(runtimeDir, flavor, "sandboxes")
		if sandboxDir != "" {
			stateRoot = filepath.Join(sandboxDir, flavor)
		}
		return oci.Config{
			IDPool: ids,
			Flavor: flavor,
			// Each runtime has its own state and sandbox directories, so
			// one never mistakes another's sandboxes for orphans.
			RootDir:   dd.join(runtimeDir, flavor, "state"),
			StateRoot: stateRoot,
			Logger:    log.With("component", "runtime", "runtime", flavor),
		}
	}
	if name != "" {
		switch name {
		case "runc", "crun":
			// Their sandboxes' roots are unprivileged host users that must
			// reach their directories below DATA/runtime, or below
			// --sandbox-dir (each sandbox's own directory stays closed to
			// others).
			dirs := []string{dd.path, dd.join(runtimeDir), dd.join(runtimeDir, name)}
			if sandboxDir != "" {
				dirs = []string{sandboxDir}
			}
			if err := os.MkdirAll(dirs[len(dirs)-1], 0o711); err != nil {
				return nil, err
			}
			if err := searchable(dirs...); err != nil {
				return nil, err
			}
		case "runsc":
		default:
			return nil, fmt.Errorf("--runtime %q: must be runc, crun or runsc", name)
		}
		rt, err := probed(ctx, cfgFor(name), agentBin)
		if err != nil {
			return nil, fmt.Errorf("runtime %s does not work on this host: %w", name, err)
		}
		info := rt.Info()
		log.Info("using the requested runtime", "runtime", info.Name, "version", info.Version, "isolation", info.Isolation, "capabilities", info.Capabilities)
		return rt, nil
	}
	var errs []error
	for _, flavor := range autoCandidates() {
		rt, err := probed(ctx, cfgFor(flavor), agentBin)
		if err != nil {
			log.Info("runtime unavailable", "runtime", flavor, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", flavor, err))
			continue
		}
		info := rt.Info()
		log.Info("picked the strongest runtime that works on this host", "runtime", info.Name, "version", info.Version, "isolation", info.Isolation, "capabilities", info.Capabilities)
		return rt, nil
	}
	return nil, fmt.Errorf("no runtime with isolation stronger than shared-kernel works on this host (%w); install gVisor runsc, or pass --runtime crun or --runtime runc to accept shared-kernel isolation", errors.Join(errs...))
}

// probed makes the runtime and proves it runs a container here.
func probed(ctx context.Context, cfg oci.Config, agentBin string) (*oci.Runtime, error) {
	rt, err := oci.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := rt.Probe(ctx, agentBin); err != nil {
		return nil, err
	}
	return rt, nil
}

// resolveSandboxDir returns --sandbox-dir as an absolute path without
// symlinks, creating it (mode 0700) if needed; "" stays "" (the default
// under the data dir).
func resolveSandboxDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--sandbox-dir %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("--sandbox-dir: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("--sandbox-dir: %w", err)
	}
	return real, nil
}

// searchable adds search (not read) permission for group and others to
// each directory.
func searchable(dirs ...string) error {
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if mode := fi.Mode().Perm(); mode&0o011 != 0o011 {
			if err := os.Chmod(d, mode|0o011); err != nil {
				return fmt.Errorf("make %s searchable: %w", d, err)
			}
		}
	}
	return nil
}
