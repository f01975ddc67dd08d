package oci

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// probeTimeout bounds a probe when ctx has no earlier deadline.
const probeTimeout = 90 * time.Second

// probePrefix starts the names of probe containers and directories; they are
// never sandbox IDs, so List ignores them.
const probePrefix = "airlock-probe-"

// Probe proves that the runtime configured by cfg really runs containers on
// this host: it runs a throwaway container whose root filesystem is an empty
// directory with only the agent bind-mounted, executes
// `/.airlock/bin/airlock-agent --version` in it and checks that it prints
// what the agent prints on the host. It removes everything it created.
func Probe(ctx context.Context, cfg Config, agentBinary string) (runtime.Info, error) {
	r, err := New(cfg)
	if err != nil {
		return runtime.Info{}, err
	}
	return r.Info(), r.Probe(ctx, agentBinary)
}

// Probe is the package-level Probe for a Runtime already made, so a caller
// that goes on to use the runtime does not construct it twice.
func (r *Runtime) Probe(ctx context.Context, agentBinary string) error {
	info := r.Info()
	var err error
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	if agentBinary, err = filepath.Abs(agentBinary); err != nil {
		return err
	}
	if usesUserns(r.flavor) {
		if err := reachableByOthers(agentBinary); err != nil {
			return fmt.Errorf("probe %s: agent binary: %w", info.Name, err)
		}
	}
	want, err := exec.CommandContext(ctx, agentBinary, "--version").Output()
	if err != nil {
		return fmt.Errorf("probe %s: run %s --version on the host: %w", info.Name, agentBinary, err)
	}
	if err := r.cleanStaleProbes(ctx); err != nil {
		return fmt.Errorf("probe %s: remove the leftovers of an earlier probe: %w", info.Name, err)
	}
	got, err := r.probe(ctx, agentBinary)
	if err != nil {
		return fmt.Errorf("probe %s: %w", info.Name, err)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		return fmt.Errorf("probe %s: the agent in the container printed %q, want %q", info.Name, truncate(got), strings.TrimSpace(string(want)))
	}
	return nil
}

func (r *Runtime) probe(ctx context.Context, agentBinary string) (out string, err error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	name := probePrefix + hex.EncodeToString(b[:])
	dir := filepath.Join(r.stateRoot, name)
	cg, err := r.cgroupParent.Join(name)
	if err != nil {
		return "", err
	}
	// The probe's root filesystem is made as a sandbox's is (an overlay,
	// over an idmapped view with a user namespace) over an empty template.
	dirs := sandboxDirs{
		state: dir, upper: filepath.Join(dir, "upper"), work: filepath.Join(dir, "work"),
		rootfs: filepath.Join(dir, "rootfs"), lower: filepath.Join(dir, "lower"),
	}
	template := filepath.Join(dir, "template")
	defer func() {
		if cerr := r.cleanProbe(context.WithoutCancel(ctx), name, dir, cg); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for _, d := range []string{template, dirs.upper, dirs.work, dirs.rootfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	ids, err := r.idRange(name, dirs)
	if err != nil {
		return "", err
	}
	if err := r.mountRootfs(ctx, template, dirs, ids); err != nil {
		return "", err
	}
	spec, err := r.ociSpec(specParams{
		args:        []string{GuestAgentPath, "--version"},
		env:         guestEnv(nil),
		rootfs:      dirs.rootfs,
		hostname:    "airlock-probe",
		cgroup:      cg,
		agentBinary: agentBinary,
		resources:   runtime.Resources{CPUs: 1, MemoryBytes: 512 << 20, PidsLimit: 64},
		ids:         ids,
	})
	if err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return "", err
	}
	outFile, err := os.Create(filepath.Join(dir, "output"))
	if err != nil {
		return "", err
	}
	defer outFile.Close()
	cmd := r.command(ctx, "run", "--bundle", dir, name)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = outFile, &stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	runErr := cmd.Run()
	output, _ := os.ReadFile(outFile.Name())
	if runErr != nil {
		return "", fmt.Errorf("run a container: %w: %s", runErr, strings.TrimSpace(stderr.String()+"\n"+string(output)))
	}
	return string(output), nil
}

// cleanStaleProbes removes what an earlier probe left behind when its
// process died half-way. One server owns a configuration, so no other probe
// runs concurrently on it.
func (r *Runtime) cleanStaleProbes(ctx context.Context) error {
	names := map[string]bool{}
	if out, err := r.run(ctx, "list", "--quiet"); err == nil {
		_, other := ParseList(string(out))
		for _, n := range other {
			if strings.HasPrefix(n, probePrefix) {
				names[n] = true
			}
		}
	}
	entries, err := os.ReadDir(r.stateRoot)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), probePrefix) {
			names[e.Name()] = true
		}
	}
	for name := range names {
		cg, err := r.cgroupParent.Join(name)
		if err != nil {
			return err
		}
		r.log.Warn("removing the leftovers of an interrupted probe", "name", name)
		if err := r.cleanProbe(ctx, name, filepath.Join(r.stateRoot, name), cg); err != nil {
			return err
		}
	}
	return nil
}

// cleanProbe removes the probe container, its cgroups and its directory.
func (r *Runtime) cleanProbe(ctx context.Context, name, dir string, cg cgroups.Path) error {
	_, _ = r.run(ctx, "delete", "--force", name)
	killCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := r.cgroups.Kill(killCtx, cg); err != nil {
		return err
	}
	if err := r.cgroups.Remove(ctx, cg); err != nil {
		return err
	}
	mounts, err := rootfs.MountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := rootfs.Unmount(ctx, r.log, m); err != nil {
			return err
		}
	}
	if left, err := rootfs.MountsUnder(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("probe directory still has mounts %q (%v)", left, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if r.ids != nil {
		r.ids.release(name)
	}
	return nil
}
