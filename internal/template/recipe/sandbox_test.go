package recipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// chrootSandbox is the tests' Sandbox: it runs the command in the build
// helper's chroot over the parent's tree (the busybox base is the test's
// own) and hands back the overlay's upper directory, as the server's
// sandboxes hand back theirs.
type chrootSandbox struct{ b *Builder }

func (c chrootSandbox) Run(ctx context.Context, req SandboxRun) (SandboxResult, error) {
	dir, err := os.MkdirTemp(c.b.Store.Dir(), "sandbox-")
	if err != nil {
		return SandboxResult{}, err
	}
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(dir)
			return SandboxResult{}, err
		}
	}
	h, rc, err := startHelper(ctx, []string{c.b.Store.RootfsDir(req.Parent.Digest)}, upper, work, merged, req.Argv, req.Env, req.Log)
	if err != nil {
		os.RemoveAll(dir)
		return SandboxResult{}, err
	}
	return SandboxResult{ExitCode: rc, Layer: upper, Release: func() {
		h.wait()
		os.RemoveAll(dir)
	}}, nil
}

// layerSandbox is a Sandbox that runs nothing: its layer is made by the
// test (what a guest could leave there).
type layerSandbox struct {
	make           func(layer string)
	idHost, idSize uint32
	released       *bool
	ran            *SandboxRun
}

func (l layerSandbox) Run(ctx context.Context, req SandboxRun) (SandboxResult, error) {
	*l.ran = req
	dir, err := os.MkdirTemp("", "layer-")
	if err != nil {
		return SandboxResult{}, err
	}
	layer := filepath.Join(dir, "upper")
	if err := os.Mkdir(layer, 0o755); err != nil {
		return SandboxResult{}, err
	}
	l.make(layer)
	return SandboxResult{Layer: layer, IDHost: l.idHost, IDSize: l.idSize, Release: func() {
		*l.released = true
		os.RemoveAll(dir)
	}}, nil
}

// A sandboxed step's template is the parent's tree with the sandbox's
// layer over it: added files with the guest's owners (shifted back from
// the sandbox's id range), files the guest deleted (whiteouts) gone, an
// opaque directory's old content gone, the runtime's own entries dropped;
// the sandbox is released; the command and environment are the step's.
func TestSandboxStepCapturesTheLayer(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	const idHost = 200000
	var released bool
	var ran SandboxRun
	sb := layerSandbox{idHost: idHost, idSize: 65536, released: &released, ran: &ran, make: func(l string) {
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(l, "opt/app"), 0o755))
		must(os.WriteFile(filepath.Join(l, "opt/app/new"), []byte("made in the sandbox\n"), 0o640))
		must(os.Lchown(filepath.Join(l, "opt/app/new"), idHost+1000, idHost+1000))
		must(os.Lchown(filepath.Join(l, "opt/app"), idHost, idHost))
		must(os.Lchown(filepath.Join(l, "opt"), idHost, idHost))
		must(os.MkdirAll(filepath.Join(l, "bin"), 0o755))
		must(unix.Mknod(filepath.Join(l, "bin/cat"), unix.S_IFCHR, 0)) // a whiteout: deleted
		must(os.MkdirAll(filepath.Join(l, "etc"), 0o755))
		must(unix.Lsetxattr(filepath.Join(l, "etc"), "trusted.overlay.opaque", []byte("y"), 0))
		must(os.WriteFile(filepath.Join(l, "etc/only"), []byte("x"), 0o644))
		must(os.MkdirAll(filepath.Join(l, ".airlock/bin"), 0o755))
		must(os.WriteFile(filepath.Join(l, ".airlock/bin/airlock-agent"), nil, 0o755))
	}}
	var log bytes.Buffer
	r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{run: 'echo hi'}]\nenv: {FOO: bar}\n", base))
	res, err := b.BuildWith(context.Background(), r, "", BuildOptions{Log: &log, Sandbox: sb})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if !released {
		t.Error("the sandbox was not released")
	}
	if strings.Join(ran.Argv, " ") != "/bin/sh -c echo hi" || ran.Parent.Digest != base {
		t.Errorf("the sandbox ran %q on %s", ran.Argv, ran.Parent.Digest)
	}
	d := res.Steps[1].Digest
	root := b.Store.RootfsDir(d)
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, "opt/app/new"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o777 != 0o640 {
		t.Errorf("opt/app/new: %+v, %v; want owner 1000:1000, mode 0640", st, err)
	}
	if err := unix.Lstat(filepath.Join(root, "opt/app"), &st); err != nil || st.Uid != 0 {
		t.Errorf("opt/app: uid %d, %v; want 0", st.Uid, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "bin/cat")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bin/cat, deleted in the sandbox: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "bin/sh")); err != nil {
		t.Errorf("bin/sh, kept: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "etc"))
	if len(ents) != 1 || ents[0].Name() != "only" {
		t.Errorf("etc, opaque in the sandbox: %v", ents)
	}
	if _, err := os.Lstat(filepath.Join(root, ".airlock/bin/airlock-agent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runtime's mount point .airlock/bin/airlock-agent in the template: %v", err)
	}
	// The same recipe again: cached, the sandbox not run.
	ran = SandboxRun{}
	res2, err := b.BuildWith(context.Background(), r, "", BuildOptions{Sandbox: sb})
	if err != nil || ran.Argv != nil || res2.Imported.Digest != res.Imported.Digest {
		t.Errorf("rebuild: %v, ran %q, %s vs %s", err, ran.Argv, res2.Imported.Digest, res.Imported.Digest)
	}
}

// A device node in the layer (a guest that could make one) fails the
// step; nothing is imported and the sandbox is released.
func TestSandboxStepRefusesDevices(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	var released bool
	var ran SandboxRun
	sb := layerSandbox{released: &released, ran: &ran, make: func(l string) {
		if err := unix.Mknod(filepath.Join(l, "disk"), unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))); err != nil {
			t.Fatal(err)
		}
	}}
	r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{run: 'true'}]\n", base))
	_, err := b.BuildWith(context.Background(), r, "", BuildOptions{Sandbox: sb})
	if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "device node") {
		t.Fatalf("err = %v, want a refused device node", err)
	}
	if !released {
		t.Error("the sandbox was not released")
	}
}

// A run step's user (resolved against the parent's /etc/passwd), working
// directory and environment reach the sandbox; a user the parent lacks
// fails the step before any sandbox is made.
func TestSandboxStepUserDirEnv(t *testing.T) {
	b := newBuilder(t, "")
	base := busybox(t, b)
	var released bool
	var ran SandboxRun
	sb := layerSandbox{released: &released, ran: &ran, make: func(string) {}}
	r := mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{run: id, user: '1000:1001', workdir: /tmp, env: {X: y}}]\n", base))
	if _, err := b.BuildWith(context.Background(), r, "", BuildOptions{Sandbox: sb}); err != nil {
		t.Fatal(err)
	}
	if ran.User == nil || *ran.User != (model.UserIDs{UID: 1000, GID: 1001}) || ran.Dir != "/tmp" || !slices.Contains(ran.Env, "X=y") || !slices.Contains(ran.Env, "HOME=/root") {
		t.Errorf("the sandbox ran with user %v, dir %q, env %q", ran.User, ran.Dir, ran.Env)
	}
	ran = SandboxRun{}
	r = mustParse(t, fmt.Sprintf("from: {template: %q}\nsteps: [{run: id, user: nosuchuser}]\n", base))
	_, err := b.BuildWith(context.Background(), r, "", BuildOptions{Sandbox: sb})
	var se *StepError
	if !errors.As(err, &se) || !strings.Contains(se.Error(), "nosuchuser") || ran.Argv != nil {
		t.Errorf("a user the template lacks: %v (ran %q)", err, ran.Argv)
	}
}
