package runtimetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/cgroups"
	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs"
	"github.com/airlockdev/airlock/internal/runtime"
)

// defaultOpTimeout bounds one runtime operation or command in the suite
// unless the runtime's Profile asks for longer (see opTimeout).
const defaultOpTimeout = 90 * time.Second

// markerFile is a template file the suite overwrites inside sandboxes.
const (
	markerFile    = "airlock-template-marker"
	markerContent = "from the template\n"
)

// syscallProbe is the template path of testdata/syscallprobe (static).
const syscallProbe = "bin/airlock-syscallprobe"

// defaultResources are the limits of the suite's sandboxes. The memory limit
// leaves room for gVisor's sentry, which the host cgroup also charges.
var defaultResources = runtime.Resources{CPUs: 1, MemoryBytes: 256 << 20, PidsLimit: 64, DiskBytes: 128 << 20}

type suite struct {
	agent    string
	template string
	cgroups  cgroups.Host
	slots    slots
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	airtest.RequireRoot(t)
	s := &suite{agent: airtest.BuildAgent(t), template: airtest.BusyboxRootfs(t)}
	if err := os.WriteFile(filepath.Join(s.template, markerFile), []byte(markerContent), 0o644); err != nil {
		t.Fatal(err)
	}
	probe, err := os.ReadFile(airtest.BuildBinary(t, "./internal/runtime/runtimetest/testdata/syscallprobe"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.template, syscallProbe), probe, 0o755); err != nil {
		t.Fatal(err)
	}
	host, err := cgroups.Detect()
	if err != nil {
		t.Fatal(err)
	}
	s.cgroups = host
	before := treeDigest(t, s.template)
	t.Cleanup(func() {
		if after := treeDigest(t, s.template); after != before {
			t.Errorf("the template directory changed while sandboxes ran from it")
		}
	})
	return s
}

// treeDigest hashes names, modes, link targets and contents of a tree.
func treeDigest(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		io.WriteString(h, rel+"\x00"+fi.Mode().String()+"\x00")
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, target)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		io.WriteString(h, "\x00")
		return nil
	})
	if err != nil {
		t.Fatalf("hash template: %v", err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (s *suite) spec(res runtime.Resources, env model.Env) runtime.Spec {
	return runtime.Spec{
		ID:          model.NewSandboxID(),
		RootFS:      runtime.RootFS{Lower: s.template},
		Hostname:    "airlock-test",
		Env:         env,
		Resources:   res,
		AgentBinary: s.agent,
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	t.Cleanup(cancel)
	return ctx
}

func inspector(t *testing.T, rt runtime.Runtime) Inspector {
	t.Helper()
	in, ok := rt.(Inspector)
	if !ok {
		t.Fatalf("%T does not implement runtimetest.Inspector", rt)
	}
	return in
}

// started creates and starts a sandbox and deletes it (checking that
// nothing is left) when the test ends. Like the worker, it asks Create to
// start the sandbox too (spec.Start), where the runtime can, so that the
// cases run sandboxes made the way Airlock makes them.
func (s *suite) started(t *testing.T, rt runtime.Runtime, spec runtime.Spec) {
	t.Helper()
	ctx := ctxFor(t)
	t.Cleanup(func() { s.deleteAndCheck(t, rt, spec.ID) })
	spec.Start = true
	if err := rt.Create(ctx, spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

// deleteAndCheck deletes a sandbox and checks it left no trace.
func (s *suite) deleteAndCheck(t *testing.T, rt runtime.Runtime, id model.SandboxID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	defer cancel()
	if err := rt.Delete(ctx, id); err != nil {
		t.Errorf("Delete(%s): %v", id, err)
		return
	}
	s.assertGone(t, rt, id)
}

// assertGone checks that no trace of the sandbox is left: not in State, not
// in List, no state directory, no mount, no loop device bound to a file in
// it, no cgroup in any hierarchy.
func (s *suite) assertGone(t *testing.T, rt runtime.Runtime, id model.SandboxID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	defer cancel()
	if st, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State after Delete = %+v, %v; want ErrNotFound", st, err)
	}
	ids, err := rt.List(ctx)
	if err != nil {
		t.Errorf("List: %v", err)
	} else if slices.Contains(ids, id) {
		t.Errorf("List still contains %s after Delete", id)
	}
	a := inspector(t, rt).Artifacts(id)
	for _, mp := range a.MountPoints {
		if mounted, err := rootfs.IsMounted(mp); err != nil || mounted {
			t.Errorf("%s still mounted after Delete (%v)", mp, err)
		}
	}
	if a.StateDir != "" {
		if under, err := rootfs.MountsUnder(a.StateDir); err != nil || len(under) > 0 {
			t.Errorf("mounts left under %s: %q (%v)", a.StateDir, under, err)
		}
		if _, err := os.Lstat(a.StateDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("state dir %s still exists after Delete (%v)", a.StateDir, err)
		}
		assertNoLoopDevices(t, a.StateDir)
	}
	if a.Cgroup != "" {
		if dirs, err := s.cgroups.Existing(a.Cgroup); err != nil || len(dirs) > 0 {
			t.Errorf("cgroup %s left in %q (%v)", a.Cgroup, dirs, err)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// client returns an agent client for the sandbox, closed when the test ends.
func client(t *testing.T, rt runtime.Runtime, id model.SandboxID) *agentclient.Client {
	t.Helper()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return rt.DialAgent(ctx, id) }, testLogger(t))
	t.Cleanup(func() { c.Close() })
	return c
}

// run runs a command in the sandbox and returns its result.
func run(t *testing.T, c *agentclient.Client, args ...string) agentclient.RunResult {
	t.Helper()
	res, err := tryRun(t, c, args...)
	if err != nil {
		t.Fatalf("run %q: %v (stdout %q, stderr %q)", args, err, res.Stdout, res.Stderr)
	}
	return res
}

func tryRun(t *testing.T, c *agentclient.Client, args ...string) (agentclient.RunResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout())
	defer cancel()
	return c.Run(ctx, agentproto.StartRequest{ID: model.NewProcessID().String(), Args: args})
}

// sh runs a shell script in the sandbox and fails unless it exits 0.
func sh(t *testing.T, c *agentclient.Client, script string) string {
	t.Helper()
	res := run(t, c, "sh", "-c", script)
	if res.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit %d signal %q\nstdout: %s\nstderr: %s", script, res.ExitCode, res.Signal, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	timeout = scaled(timeout)
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (%s)", timeout, what, detail)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mustState(t *testing.T, rt runtime.Runtime, id model.SandboxID, want runtime.Phase) runtime.Status {
	t.Helper()
	st, err := rt.State(ctxFor(t), id)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if st.Phase != want {
		t.Fatalf("State = %+v, want phase %s", st, want)
	}
	return st
}

// isVM reports whether the runtime's sandboxes are virtual machines (a
// guest kernel of their own, whose root holds every capability in it).
func isVM(rt runtime.Runtime) bool {
	iso := rt.Info().Isolation
	return iso == environment.IsolationHardwareVM || iso == environment.IsolationEmulatedVM
}

func lines(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '\n' })
}
