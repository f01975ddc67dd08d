package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// Peer names accepted in Config.Peers.
const (
	PeerRunc   = "runc"
	PeerCrun   = "crun"
	PeerRunsc  = "runsc"
	PeerPodman = "podman"
)

// peerNames lists every raw peer, in report order.
func peerNames() []string { return []string{PeerRunc, PeerCrun, PeerRunsc, PeerPodman} }

// peerTimeout bounds one raw run.
const peerTimeout = 2 * time.Minute

// peerSubject runs `echo hello` with an OCI runtime (or podman) directly.
// Each run gets a fresh bundle directory under dir: an overlayfs over the
// template tree as its root (so nothing ever writes to the template) and a
// config.json with an Airlock sandbox's settings.
type peerSubject struct {
	peer     string // PeerRunc, …
	binary   string
	dir      string // bundles and the runtime's --root live here
	lower    string // the template's read-only tree
	cg       cgroups.Host
	cgParent cgroups.Path
	// unifiedToHide is the cgroup2 mount crun must not see on a hybrid host.
	unifiedToHide string
	// podmanRuntime is podman's --runtime ("" for its default).
	podmanRuntime string
	// ids is the user namespace's id range of runc and crun peers.
	ids *rootfs.IDRange
	log *slog.Logger
	seq int
}

func newPeer(peer, binary, dir, lower string, cg cgroups.Host, cgParent cgroups.Path, log *slog.Logger) (*peerSubject, error) {
	if err := os.MkdirAll(filepath.Join(dir, "root", "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", peer, err)
	}
	p := &peerSubject{peer: peer, binary: binary, dir: dir, lower: lower, cg: cg, cgParent: cgParent, log: log, ids: peerIDs(peer)}
	if p.ids != nil {
		// The container's root, an unprivileged host user, must reach
		// the bundles' root filesystems below dir.
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, fmt.Errorf("%s: %w", peer, err)
		}
	}
	if peer == PeerCrun && cg.Layout == cgroups.LayoutHybrid {
		if u, ok := cg.Unified(); ok {
			p.unifiedToHide = u.MountPoint
		}
	}
	if peer == PeerPodman && cg.Layout == cgroups.LayoutHybrid {
		runc, err := exec.LookPath("runc")
		if err != nil {
			return nil, fmt.Errorf("podman: on this hybrid cgroup host it needs runc (its default crun refuses hybrid cgroups): %w", err)
		}
		p.podmanRuntime = runc
	}
	return p, nil
}

func (p *peerSubject) info() Subject {
	s := Subject{
		Name:      p.peer + " run",
		Kind:      KindRaw,
		Runtime:   p.peer,
		Isolation: environment.IsolationSharedKernel,
		Method:    "fork/exec of `" + strings.Join(p.displayArgs(), " ") + "` → first byte on its stdout pipe",
		Rootfs: "per-run overlayfs over the same template tree (mounted before the clock starts); " +
			"an Airlock sandbox's namespaces, capabilities and limits (1 CPU, 512 MiB, 1024 pids), no guest agent",
	}
	if p.ids != nil {
		s.Rootfs += "; a user namespace (root = host uid " + strconv.FormatUint(uint64(p.ids.Host), 10) + ") over an idmapped view of the template, as Airlock's driver"
	}
	switch p.peer {
	case PeerRunsc:
		s.Isolation = environment.IsolationUserSpaceKernel
		s.Rootfs += "; --network=none --overlay2=none as Airlock's driver"
	case PeerCrun:
		if p.unifiedToHide != "" {
			s.Method += " (inside the clock: a private mount namespace without " + p.unifiedToHide +
				", the hybrid-cgroup workaround Airlock's driver also pays)"
		}
	case PeerPodman:
		s.Rootfs = "--rootfs on a per-run overlayfs over the same template tree (mounted before the clock starts); " +
			"--network none, --cpus 1 --memory 512m --pids-limit 1024, lower nofile/nproc ulimits (root lacks CAP_SYS_RESOURCE here), " +
			"own --root/--runroot/--tmpdir in the temporary dir"
		if p.podmanRuntime != "" {
			s.Rootfs += "; OCI runtime runc (crun refuses hybrid cgroups)"
		}
	}
	return s
}

// displayArgs is the command line with placeholders, for the report.
func (p *peerSubject) displayArgs() []string {
	return append([]string{p.peer}, p.args("ROOT", "BUNDLE", "NAME")...)
}

// root is the runtime's own state directory (podman's storage, run and
// temporary directories are below it).
func (p *peerSubject) root() string { return filepath.Join(p.dir, "root") }

// args are the arguments of the runtime binary for one run.
func (p *peerSubject) args(root, bundle, name string) []string {
	switch p.peer {
	case PeerRunsc:
		return []string{"--root", root, "--network=none", "--overlay2=none", "run", "--bundle", bundle, name}
	case PeerPodman:
		// --rootfs is a boolean flag: the path is the first positional
		// argument, so every option comes before it.
		args := append(p.podmanGlobal(root), "run", "--rm", "--network", "none",
			"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"--cpus", strconv.Itoa(peerCPUs), "--memory", strconv.Itoa(peerMemoryMiB)+"m",
			"--pids-limit", strconv.Itoa(peerPids), "--cgroup-parent", p.cgParent.String(),
			"--name", name, "--rootfs", filepath.Join(bundle, "rootfs"))
		return append(args, peerArgs()...)
	default:
		return []string{"--root", root, "run", "--bundle", bundle, name}
	}
}

// podmanGlobal are podman's global flags: its own storage, run and
// temporary directories below root (the host's podman state is never
// touched) and, on a hybrid cgroup host, runc as its OCI runtime (crun,
// podman's default, refuses hybrid cgroups there).
func (p *peerSubject) podmanGlobal(root string) []string {
	args := []string{"--root", filepath.Join(root, "storage"), "--runroot", filepath.Join(root, "run"),
		"--tmpdir", filepath.Join(root, "tmp")}
	if p.podmanRuntime != "" {
		args = append(args, "--runtime", p.podmanRuntime)
	}
	return args
}

// command builds an invocation of the binary; for crun on a hybrid host it
// runs in a private mount namespace where the cgroup2 mount is gone, as
// Airlock's driver does.
func (p *peerSubject) command(args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	attr := &syscall.SysProcAttr{Setsid: true} // a terminal's Ctrl-C reaches us, not the runtime
	if p.unifiedToHide != "" {
		script := `umount -- "$1" && shift && exec "$@"`
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, "sh", p.unifiedToHide, p.binary}, args...)...)
		attr.Unshareflags = syscall.CLONE_NEWNS
	} else {
		cmd = exec.Command(p.binary, args...)
	}
	cmd.SysProcAttr = attr
	cmd.Env = []string{"PATH=" + guestPath}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (p *peerSubject) once(ctx context.Context) (sample, error) {
	p.seq++
	name := fmt.Sprintf("alb-%s-%d", p.peer, p.seq)
	bundle := filepath.Join(p.dir, name)
	cg, err := p.cgParent.Join(name)
	if err != nil {
		return sample{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	smp, err := p.run(ctx, name, bundle, cg)
	if cerr := p.remove(context.WithoutCancel(ctx), name, bundle, cg); cerr != nil {
		err = errors.Join(err, fmt.Errorf("clean up %s: %w", name, cerr))
	}
	return smp, err
}

func (p *peerSubject) run(ctx context.Context, name, bundle string, cg cgroups.Path) (sample, error) {
	if err := p.prepare(name, bundle, cg); err != nil {
		return sample{}, fmt.Errorf("prepare the bundle: %w", err)
	}
	first, out, err := timeFirstByte(ctx, p.command(p.args(p.root(), bundle, name)...))
	if err != nil {
		return sample{}, err
	}
	if out != peerOutput {
		return sample{}, fmt.Errorf("printed %q, want %q", out, peerOutput)
	}
	return sample{total: first}, nil
}

// prepare creates the bundle: the overlay root and config.json.
func (p *peerSubject) prepare(name, bundle string, cg cgroups.Path) error {
	upper, work, root := filepath.Join(bundle, "upper"), filepath.Join(bundle, "work"), filepath.Join(bundle, "rootfs")
	for _, d := range []string{upper, work, root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Chmod(upper, 0o755); err != nil { // the overlay root takes the upper dir's mode
		return err
	}
	if err := p.mountRootfs(bundle, upper, work, root); err != nil {
		return err
	}
	if p.peer == PeerPodman {
		return nil
	}
	spec, err := peerSpec(oci.Flavor(p.peer), root, name, cg, p.ids)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600)
}

// mountRootfs mounts the bundle's overlay as Airlock mounts a sandbox's:
// with a user namespace, over an idmapped view of the template, with the
// upper dir and the bundle's access given to the mapped root.
func (p *peerSubject) mountRootfs(bundle, upper, work, root string) error {
	if p.ids == nil {
		return rootfs.MountOverlay(p.lower, upper, work, root)
	}
	host := int(p.ids.Host)
	if err := os.Chown(upper, host, host); err != nil {
		return err
	}
	if err := os.Chown(bundle, 0, host); err != nil {
		return err
	}
	if err := os.Chmod(bundle, 0o710); err != nil {
		return err
	}
	scratch := filepath.Join(bundle, "lower")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return err
	}
	userns, err := rootfs.NewUserns(*p.ids)
	if err != nil {
		return err
	}
	defer userns.Close()
	return rootfs.MountOverlayIDMapped(context.Background(), p.log, p.lower, scratch, upper, work, root, userns)
}

// remove deletes the container (a no-op when `run` already did), kills and
// removes its cgroup, unmounts its root and removes the bundle.
func (p *peerSubject) remove(ctx context.Context, name, bundle string, cg cgroups.Path) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var del []string
	root := p.root()
	switch p.peer {
	case PeerPodman:
		del = append(p.podmanGlobal(root), "rm", "--force", "--ignore", name)
	default:
		del = []string{"--root", root, "delete", "--force", name}
	}
	if exists := p.containerExists(name); exists {
		cmd := p.command(del...)
		if out, err := runWithContext(ctx, cmd); err != nil {
			p.log.Warn("delete a benchmark container", "peer", p.peer, "name", name, "err", err, "output", out)
		}
	}
	var errs []error
	if p.peer != PeerPodman {
		if err := p.cg.Kill(ctx, cg); err != nil {
			errs = append(errs, err)
		} else if err := p.cg.Remove(ctx, cg); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(ctx, p.log, bundle); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := os.RemoveAll(bundle); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// containerExists reports whether the runtime may still know the container:
// runc and crun keep ROOT/NAME, runsc ROOT/NAME_sandbox:…; podman is always
// asked.
func (p *peerSubject) containerExists(name string) bool {
	root := p.root()
	switch p.peer {
	case PeerPodman:
		return true
	case PeerRunsc:
		m, _ := filepath.Glob(filepath.Join(root, name+"_sandbox:*"))
		return len(m) > 0
	default:
		_, err := os.Lstat(filepath.Join(root, name))
		return err == nil
	}
}

// close removes the peers' cgroup parent (podman's containers and its
// conmon cgroup are below it too).
func (p *peerSubject) close(ctx context.Context) error {
	if err := p.cg.Kill(ctx, p.cgParent); err != nil {
		return err
	}
	return p.cg.Remove(ctx, p.cgParent)
}

// timeFirstByte starts cmd with its stdout on a pipe and returns the time
// from just before the fork to the first byte read, and everything the
// command printed on stdout. If ctx ends first the process is killed.
func timeFirstByte(ctx context.Context, cmd *exec.Cmd) (time.Duration, string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		w.Close()
		return 0, "", fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	w.Close()
	stop := context.AfterFunc(ctx, func() {
		_ = cmd.Process.Kill()
		_ = r.SetReadDeadline(time.Now())
	})
	defer stop()

	var first time.Duration
	buf := make([]byte, 512)
	n, rerr := r.Read(buf)
	if n > 0 {
		first = time.Since(t0)
	}
	var out bytes.Buffer
	out.Write(buf[:n])
	if rerr == nil {
		_, rerr = io.Copy(&out, io.LimitReader(r, 1<<20))
	} else if errors.Is(rerr, io.EOF) {
		rerr = nil
	}
	werr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return 0, "", fmt.Errorf("%s: %w", cmd.Path, context.Cause(ctx))
	case werr != nil:
		return 0, "", fmt.Errorf("%s: %w: %s", cmd.Path, werr, strings.TrimSpace(stderr.String()))
	case rerr != nil:
		return 0, "", fmt.Errorf("%s: reading its output: %w", cmd.Path, rerr)
	case n == 0:
		return 0, "", fmt.Errorf("%s printed nothing: %s", cmd.Path, strings.TrimSpace(stderr.String()))
	}
	return first, out.String(), nil
}

// runWithContext runs a short command and returns its combined output.
func runWithContext(ctx context.Context, cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	err := cmd.Wait()
	return strings.TrimSpace(out.String()), err
}

// unmountUnder unmounts everything at or below dir, deepest first, and
// checks that nothing is left.
func unmountUnder(ctx context.Context, log *slog.Logger, dir string) error {
	mounts, err := rootfs.MountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := rootfs.Unmount(ctx, log, m); err != nil {
			return err
		}
	}
	if left, err := rootfs.MountsUnder(dir); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("still mounted after unmount: %q", left)
	}
	return nil
}
