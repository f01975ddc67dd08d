package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/environment/registry"
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// runtimes makes the OCI runtimes of execution environments: each has its
// own state and sandbox directories below the data dir (or --sandbox-dir),
// so one never mistakes another's sandboxes for orphans.
type runtimes struct {
	ids        runtime.IDPool
	vmIDs      runtime.IDPool
	dd         *dataDir
	sandboxDir string
	// guestbootDir holds the VM boot inputs ("": DATA_DIR/guestboot).
	guestbootDir string
	agentBin     string
	log          *slog.Logger
}

func (r runtimes) config(name environment.Name) oci.Config {
	flavor := string(name)
	stateRoot := r.dd.join(runtimeDir, flavor, "sandboxes")
	if r.sandboxDir != "" {
		stateRoot = filepath.Join(r.sandboxDir, flavor)
	}
	return oci.Config{
		IDPool:    r.ids,
		Flavor:    flavor,
		RootDir:   r.dd.join(runtimeDir, flavor, "state"),
		StateRoot: stateRoot,
		Logger:    r.log.With("component", "runtime", "runtime", flavor),
	}
}

// open makes the runtime of environment name and proves it runs a
// sandbox here with a probe. It returns the runtime whenever it could be
// made (its binary is installed), also when the probe failed, so its
// definition can be recorded with the reason.
func (r runtimes) open(ctx context.Context, name environment.Name) (environmentRuntime, error) {
	if name == environment.NameQEMU {
		rt, err := r.openQEMU(ctx)
		if rt == nil {
			return nil, err
		}
		return rt, err
	}
	if !name.IsOCI() {
		return nil, fmt.Errorf("environment %s: no runtime", name)
	}
	rt, err := r.openOCI(ctx, name)
	if rt == nil {
		return nil, err
	}
	return ociEnvironment{rt}, err
}

// ociEnvironment is an OCI runtime as an environment's runtime.
type ociEnvironment struct{ *oci.Runtime }

// DefinitionInputs: an OCI environment's definition names its snapshot
// format besides the binary.
func (e ociEnvironment) DefinitionInputs() registry.Inputs {
	return registry.Inputs{SnapshotFormat: ociSnapshotFormat(e.Info())}
}

func (r runtimes) openOCI(ctx context.Context, name environment.Name) (*oci.Runtime, error) {
	if name == environment.NameRunc || name == environment.NameCrun {
		// Their sandboxes' roots are unprivileged host users that must
		// reach their directories below DATA/runtime, or below
		// --sandbox-dir (each sandbox's own directory stays closed to
		// others).
		dirs := []string{r.dd.path, r.dd.join(runtimeDir), r.dd.join(runtimeDir, string(name))}
		if r.sandboxDir != "" {
			dirs = []string{r.sandboxDir}
		}
		if err := os.MkdirAll(dirs[len(dirs)-1], 0o711); err != nil {
			return nil, err
		}
		if err := searchable(dirs...); err != nil {
			return nil, err
		}
	}
	rt, err := oci.New(r.config(name))
	if err != nil {
		return nil, err
	}
	return rt, rt.Probe(ctx, r.agentBin)
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
