package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// Sandbox runs the command of a run or packages step on a template base
// inside a sandbox of the step's parent template: the template's own
// programs never run on the build host. The server's implementation
// (internal/server, buildsandbox.go) makes a real sandbox through the
// store, the controller and the worker, as any create, with the build's
// egress policy.
type Sandbox interface {
	// Run starts a sandbox of req.Parent, runs req.Argv in it as root
	// with req.Env in "/", writes its output to req.Log and, once it has
	// exited, stops every process of the sandbox (a paused sandbox) and
	// returns its writable layer. The caller calls the result's Release
	// (which deletes the sandbox) once it has copied the layer, also
	// after an error of its own; Run itself cleans up when it fails.
	Run(ctx context.Context, req SandboxRun) (SandboxResult, error)
}

// SandboxRun is one command for Sandbox.Run.
type SandboxRun struct {
	// Parent is the template the sandbox is made of: an earlier step's
	// result is in the template store, not yet recorded in the server's
	// database (the server records it before its create).
	Parent template.Imported
	Argv   []string
	Env    []string // NAME=VALUE
	// User runs the command as these IDs (nil: root) in Dir ("": "/").
	User *model.UserIDs
	Dir  string
	Log  io.Writer
	// Timeout, if set, kills the command (its process group) this long
	// after it started.
	Timeout time.Duration
	// Check runs the command to check the sandbox, not to change it: the
	// result's Layer is not needed (the sandbox need not be paused).
	Check bool
}

// SandboxResult is what a command left in its sandbox.
type SandboxResult struct {
	ExitCode int // -1: killed by a signal
	// Layer is the host path of the sandbox's writable layer, an
	// overlayfs upper directory (whiteouts, opaque directories) over the
	// parent's tree, stable while Release has not been called.
	Layer string
	// IDHost and IDSize, when IDSize is not 0, are the sandbox's user
	// namespace: the guest's id N is the host's IDHost+N in Layer.
	IDHost, IDSize uint32
	// Release deletes the sandbox; it may be nil.
	Release func()
}

// sandboxStep runs step n's command in a build sandbox of parent and
// makes the step's template of the parent's tree with the sandbox's
// writable layer over it: the layer is copied out of the sandbox (while
// it is paused), its owners shifted back to the guest's ids, then it is
// the upper of two lower layers (the copy over the parent's tree) of an
// overlay in the build helper's namespace, whose merged tree is imported
// as a copy step's is. Nothing of the sandbox runs on the host: the
// helper runs no program of the tree.
func (b *Builder) sandboxStep(ctx context.Context, n int, ps planStep, cur template.Imported, log io.Writer, sb Sandbox) (template.Imported, error) {
	if sb == nil {
		return template.Imported{}, ErrNoSandbox
	}
	parent := cur.Digest
	cfg, err := b.config(parent)
	if err != nil {
		return template.Imported{}, err
	}
	lower := b.Store.RootfsDir(parent)
	var rootSt unix.Stat_t
	if err := unix.Stat(lower, &rootSt); err != nil {
		return template.Imported{}, fmt.Errorf("parent template %s: %w", parent, err)
	}
	st, err := b.Store.NewStaged()
	if err != nil {
		return template.Imported{}, err
	}
	defer st.Remove()
	layer, upper, work, merged := filepath.Join(st.Dir(), "layer"), filepath.Join(st.Dir(), "upper"), filepath.Join(st.Dir(), "work"), filepath.Join(st.Dir(), "merged")
	req := SandboxRun{Parent: cur, Argv: ps.argv, Env: model.SetEnv(runEnv(cfg.Env), ps.runEnv), Dir: ps.runDir, Log: log}
	if ps.runUser != "" {
		ids, err := b.Store.ResolveUser(parent, ps.runUser)
		if err != nil {
			return template.Imported{}, &StepError{Step: n, Kind: ps.kind, ExitCode: -1, Reason: fmt.Sprintf("user %q: %v", ps.runUser, err)}
		}
		req.User = &ids
	}
	res, err := sb.Run(ctx, req)
	if err != nil {
		return template.Imported{}, fmt.Errorf("build sandbox: %w", err)
	}
	err = func() error {
		if res.Release != nil {
			defer res.Release()
		}
		if res.ExitCode != 0 {
			return &StepError{Step: n, Kind: ps.kind, ExitCode: res.ExitCode}
		}
		return copyLayer(ctx, res.Layer, layer)
	}()
	if err != nil {
		return template.Imported{}, err
	}
	if err := unshiftLayer(layer, res.IDHost, res.IDSize); err != nil {
		return template.Imported{}, err
	}
	if err := dropRuntimeEntries(layer); err != nil {
		return template.Imported{}, err
	}
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return template.Imported{}, err
		}
	}
	if err := os.Lchown(upper, int(rootSt.Uid), int(rootSt.Gid)); err != nil {
		return template.Imported{}, err
	}
	if err := unix.Chmod(upper, rootSt.Mode&0o7777); err != nil {
		return template.Imported{}, err
	}
	h, _, err := startHelper(ctx, []string{layer, lower}, upper, work, merged, nil, nil, log)
	if err != nil {
		return template.Imported{}, err
	}
	// What the step did not change is linked from the parent, not copied.
	imp, err := b.Store.ImportLayered(ctx, h.path(merged), layer, parent, cfg, nil)
	if werr := h.wait(); werr != nil && err == nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			err = fmt.Errorf("build helper: %w", werr)
		}
	}
	return imp, err
}

// startStep checks the start and ready commands of cur's configuration
// (template.Config.CheckScript) in a build sandbox of cur, as the
// template's user in its working directory, as a sandbox of it will run
// them. The step's result is cur itself: nothing of the check is kept.
// A ready command that does not succeed in time fails the build.
func (b *Builder) startStep(ctx context.Context, n int, cur template.Imported, log io.Writer, sb Sandbox) (template.Imported, error) {
	if sb == nil {
		return template.Imported{}, ErrNoSandbox
	}
	def, err := b.Store.Defaults(cur.Digest)
	if err != nil {
		return template.Imported{}, err
	}
	if def.UserErr != nil {
		return template.Imported{}, &StepError{Step: n, Kind: KindStart, ExitCode: -1, Reason: def.UserErr.Error()}
	}
	cfg := def.Config
	res, err := sb.Run(ctx, SandboxRun{Parent: cur, Argv: cfg.CheckScript(), Env: def.StartEnv(), User: def.User, Dir: cfg.WorkingDir, Log: log,
		Timeout: cfg.ReadyTimeout() + template.ReadyGrace, Check: true})
	if err != nil {
		return template.Imported{}, fmt.Errorf("build sandbox: %w", err)
	}
	if res.Release != nil {
		res.Release()
	}
	switch res.ExitCode {
	case 0:
		return cur, nil
	case template.ReadyTimeoutExit, -1:
		return template.Imported{}, &StepError{Step: n, Kind: KindStart, ExitCode: res.ExitCode,
			Reason: fmt.Sprintf("the ready command did not succeed within %s", cfg.ReadyTimeout())}
	default:
		return template.Imported{}, &StepError{Step: n, Kind: KindStart, ExitCode: res.ExitCode}
	}
}

// copyLayer copies the sandbox's layer src (a directory the sandbox's
// processes no longer change) to dst with cp -a: owners, modes, times,
// hard links, extended attributes (overlayfs's opaque markers among
// them) and overlayfs's whiteouts (character devices 0/0) kept, symbolic
// links copied as links, never followed.
func copyLayer(ctx context.Context, src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("the build sandbox's layer: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the build sandbox's layer %s is not a directory", src)
	}
	cp, err := lookHost("cp")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, cp, "-a", "--no-dereference", "--", src, dst)
	cmd.Env = hostEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("copy the build sandbox's layer: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unshiftLayer gives every entry of the layer at dir that the sandbox's
// user namespace (host ids from idHost, idSize of them) owns the guest's
// own ids; entries the host owns (the layer's root, overlayfs's
// whiteouts) keep theirs. idSize 0: nothing is shifted. A special file
// other than a whiteout is refused: a template holds none.
func unshiftLayer(dir string, idHost, idSize uint32) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			if st.Rdev != 0 {
				rel, _ := filepath.Rel(dir, p)
				return fmt.Errorf("%w: the build sandbox made a device node, /%s", model.ErrInvalid, rel)
			}
		case unix.S_IFBLK:
			rel, _ := filepath.Rel(dir, p)
			return fmt.Errorf("%w: the build sandbox made a device node, /%s", model.ErrInvalid, rel)
		}
		if idSize == 0 {
			return nil
		}
		in := func(id uint32) bool { return id >= idHost && uint64(id) < uint64(idHost)+uint64(idSize) }
		uid, gid := st.Uid, st.Gid
		if !in(uid) && !in(gid) {
			return nil
		}
		if in(uid) {
			uid -= idHost
		}
		if in(gid) {
			gid -= idHost
		}
		return unix.Lchown(p, int(uid), int(gid))
	})
}

// runtimeEntries are what a sandbox's runtime puts into its root
// filesystem for itself (the agent's mount points), never part of a
// template.
var runtimeEntries = []string{".airlock"}

func dropRuntimeEntries(layer string) error {
	for _, e := range runtimeEntries {
		if err := os.RemoveAll(filepath.Join(layer, e)); err != nil {
			return err
		}
	}
	return nil
}
