package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/runtime/oci"
)

// idleArgs keeps a raw peer's container running between execs.
func idleArgs() []string { return []string{"sleep", "2147483647"} }

// execPeer is one detached raw container (same bundle as a create peer,
// running sleep) that `RUNTIME exec NAME true` runs in.
type execPeer struct {
	p       *peerSubject
	name    string
	bundle  string
	cg      cgroups.Path
	started bool
}

// setup starts the container detached (untimed).
func (e *execPeer) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	if e.name == "" {
		e.name = "alb-" + e.p.peer + "-exec"
	}
	e.bundle = filepath.Join(e.p.dir, e.name)
	cg, err := e.p.cgParent.Join(e.name)
	if err != nil {
		return err
	}
	e.cg = cg
	e.started = true // from here on close removes whatever exists
	if err := e.p.prepare(e.name, e.bundle, cg); err != nil {
		return fmt.Errorf("prepare the bundle: %w", err)
	}
	spec, err := peerSpec(oci.Flavor(e.p.peer), filepath.Join(e.bundle, "rootfs"), e.name, cg, e.p.ids)
	if err != nil {
		return err
	}
	spec.Process.Args = idleArgs()
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.bundle, "config.json"), data, 0o600); err != nil {
		return err
	}
	// The container inherits the runtime's stdio: /dev/null, so that
	// nothing waits for it to close.
	cmd := e.p.command(e.runArgs()...)
	cmd.WaitDelay = 0
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start %s: %w", e.name, err)
	}
	return nil
}

// runArgs start the container detached; its stdio is /dev/null.
func (e *execPeer) runArgs() []string {
	root := e.p.root()
	if e.p.peer == PeerRunsc {
		return []string{"--root", root, "--network=none", "--overlay2=none", "run", "--detach", "--bundle", e.bundle, e.name}
	}
	return []string{"--root", root, "run", "--detach", "--bundle", e.bundle, e.name}
}

// execArgsFor is the timed command line (after the binary).
func (e *execPeer) execArgsFor(name string, args ...string) []string {
	return append([]string{"--root", e.p.root(), "exec", name}, args...)
}

func (e *execPeer) info() Subject {
	return Subject{
		Name:      e.p.peer + " exec",
		Kind:      KindRaw,
		Runtime:   e.p.peer,
		Isolation: isolationOf(e.p.peer),
		Method:    "fork/exec of `" + e.p.peer + " " + strings.Join(e.execArgsFor("NAME", execArgs()...), " ") + "` → its exit",
		Rootfs: "one detached container (" + strings.Join(idleArgs(), " ") + ") on an overlayfs over the same template tree, " +
			"an Airlock sandbox's namespaces, capabilities and limits, no guest agent",
	}
}

func (e *execPeer) once(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	cmd := e.p.command(e.execArgsFor(e.name, execArgs()...)...)
	t0 := time.Now()
	out, err := runWithContext(ctx, cmd)
	d := time.Since(t0)
	if err != nil {
		return sample{}, fmt.Errorf("%s exec: %w: %s", e.p.peer, err, out)
	}
	return sample{total: d}, nil
}

// close deletes the container and then the peers' cgroup parent.
func (e *execPeer) close(ctx context.Context) error {
	var errs []error
	if e.started {
		if err := e.p.remove(ctx, e.name, e.bundle, e.cg); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.p.close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
