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
	"github.com/airlockdev/airlock/internal/runtime"
	"github.com/airlockdev/airlock/internal/textclip"
)

// probeTimeout bounds a probe when ctx has no earlier deadline.
const probeTimeout = 90 * time.Second

// probeDiskBytes is the disk limit of the probe's container.
const probeDiskBytes = MinDiskBytes

// probePrefix starts the names of probe containers and directories; they are
// never sandbox IDs, so List ignores them.
const probePrefix = "airlock-probe-"

// Probe proves that the runtime configured by cfg really runs containers on
// this host: it runs a throwaway container made as a sandbox is (see probe)
// over an empty template, with only the agent (the shared agent
// filesystem's file, as a sandbox has it) and its run directory
// bind-mounted, executes `/.airlock/bin/airlock-agent --version` in it and
// checks that it prints what the agent prints on the host. It removes
// everything it created but the shared agent filesystem, which the
// runtime's sandboxes go on to use (see ReleaseAgentFS).
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
		return fmt.Errorf("probe %s: the agent in the container printed %q, want %q", info.Name, textclip.Bytes(got, maxEcho), strings.TrimSpace(string(want)))
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
	// The probe's container is made as a sandbox's is, over an empty
	// template: its own filesystem (a disk image of the smallest limit)
	// holding the overlay's upper layer and the agent's run directory, the
	// agent bind-mounted from the shared agent filesystem; with a user namespace, all of it given to the mapped root
	// and the overlay over an idmapped view of the template.
	dirs := dirsAt(dir)
	template := filepath.Join(dir, "template")
	defer func() {
		if cerr := r.cleanProbe(context.WithoutCancel(ctx), name, dir, cg); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for _, d := range []string{template, dirs.rootfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	agent, err := r.agent.install(agentBinary)
	if err != nil {
		return "", err
	}
	ids, err := r.idRange(name, dirs)
	if err != nil {
		return "", err
	}
	if err := r.prepareStorage(ctx, probeDiskBytes, false, dirs, ids); err != nil {
		return "", err
	}
	if err := r.mountRootfs(ctx, template, dirs, ids, agent); err != nil {
		return "", err
	}
	spec, err := r.ociSpec(specParams{
		args:        []string{GuestAgentPath, "--version"},
		env:         guestEnv(nil),
		rootfs:      dirs.rootfs,
		hostname:    "airlock-probe",
		cgroup:      cg,
		agentBinary: agent, // the same file as a sandbox's
		runDir:      dirs.run,
		resources:   runtime.Resources{CPUs: 1, MemoryBytes: 512 << 20, PidsLimit: 64, DiskBytes: probeDiskBytes},
		ids:         ids,
		usernsPath:  dirs.usernsPath,
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

// cleanProbe removes the probe container, its cgroups, its mounts and loop
// device and its directory, then frees its id range.
func (r *Runtime) cleanProbe(ctx context.Context, name, dir string, cg cgroups.Path) error {
	_, _ = r.run(ctx, "delete", "--force", name)
	killCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := r.cgroups.Kill(killCtx, cg); err != nil {
		return err
	}
	return r.removeHostState(ctx, dir, cg, name)
}
