package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// Builder builds recipes into templates of Store, caching every step's
// result in CacheDir (see cache.go). Its methods may run concurrently, also
// with other builders and processes sharing the store and the cache.
type Builder struct {
	Store    *template.Store
	CacheDir string
	Logger   *slog.Logger
	// Resolve turns the template reference of "from: template:" (a name or
	// name:tag) into a digest of Store. Digests need no resolving; when
	// Resolve is nil only they are accepted.
	Resolve func(ctx context.Context, ref string) (model.TemplateDigest, error)
}

// ErrNoSandbox: a recipe runs commands (run or packages steps) on a
// template base, which happens only inside a build sandbox
// (BuildOptions.Sandbox), and the build has none.
var ErrNoSandbox = errors.New("run and packages steps on a template base run in a build sandbox, and this build has none")

// Result is what a build produced: the final template and one StepResult
// per step of the hash chain, the base first.
type Result struct {
	Imported template.Imported
	Steps    []StepResult
}

// StepResult is one step of a build.
type StepResult struct {
	Key    string // the step's cache key (hex SHA-256)
	Kind   string // KindDebian, KindTemplate, KindPackages, KindCopy, KindRun or KindConfig
	Cached bool   // nothing was built: the result came from the cache (a template base is always Cached)
	Digest model.TemplateDigest
}

// StepError is a run (or packages) step whose command failed.
type StepError struct {
	Step     int // 1-based
	Kind     string
	ExitCode int
	// Reason, if set, says why the command did not run (ExitCode -1).
	Reason string
}

func (e *StepError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("step %d %s: the command could not run: %s", e.Step, e.Kind, e.Reason)
	}
	return fmt.Sprintf("step %d %s: the command exited with status %d", e.Step, e.Kind, e.ExitCode)
}

// sourceDateEpoch is the SOURCE_DATE_EPOCH of Debian bases (2025-01-01),
// for reproducible mmdebstrap output.
const sourceDateEpoch = "1735689600"

func (b *Builder) check() error {
	if b.Store == nil || b.CacheDir == "" {
		return errors.New("recipe builder: Store and CacheDir are required")
	}
	return os.MkdirAll(b.CacheDir, 0o700)
}

func (b *Builder) logger() *slog.Logger {
	if b.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Logger
}

// BuildOptions are the per-build options of Builder.BuildWith.
type BuildOptions struct {
	// Log gets the build's log: for each step "step N/M KIND KEY: CACHED"
	// or "… built in Xs", between them the output of mmdebstrap and of run
	// steps. Nil discards it.
	Log io.Writer
	// Progress, if set, is called as each step starts and as it ends, from
	// the goroutine that called BuildWith. Unlike the log, which run steps
	// write to, it reports only what the builder itself did.
	Progress func(StepProgress)
	// Sandbox runs the commands of run and packages steps on a template
	// base (see Sandbox); nil refuses such recipes (ErrNoSandbox). Steps
	// on a Debian base run in the build helper's chroot: their programs
	// are Debian's, from the host's apt sources.
	Sandbox Sandbox
}

// StepProgress is how far a build is: Done of Total steps ended, Cached of
// them from the cache; Step (1-based) and Kind are the step that just
// started (Done == Step-1) or ended (Done == Step).
type StepProgress struct {
	Done, Cached, Total int
	Step                int
	Kind                string
}

// Build builds r, with copy sources read from contextDir, writing its log
// to log: BuildWith with BuildOptions{Log: log}.
func (b *Builder) Build(ctx context.Context, r Recipe, contextDir string, log io.Writer) (Result, error) {
	return b.BuildWith(ctx, r, contextDir, BuildOptions{Log: log})
}

// BuildWith builds r, with copy sources read from contextDir. Steps whose
// result is cached are not run again. A failed run step fails the build
// with a *StepError; nothing stays mounted or staged.
func (b *Builder) BuildWith(ctx context.Context, r Recipe, contextDir string, opts BuildOptions) (Result, error) {
	if err := b.check(); err != nil {
		return Result{}, err
	}
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	b.tidy()
	steps, err := b.plan(ctx, r, contextDir)
	if err != nil {
		return Result{}, err
	}
	if opts.Sandbox == nil && slices.ContainsFunc(steps, func(ps planStep) bool { return ps.sandboxed }) {
		return Result{}, fmt.Errorf("%w: base the recipe on debian, or build it through a server that runs sandboxes", ErrNoSandbox)
	}
	var res Result
	cached := 0
	report := func(step, done int, kind string) {
		if opts.Progress != nil {
			opts.Progress(StepProgress{Done: done, Cached: cached, Total: len(steps), Step: step, Kind: kind})
		}
	}
	// Keys chain on keys, not on trees: the last step the cache answers
	// makes every step before it unnecessary, so only its tree is imported
	// into a store that lacks it (a server sharing the cache imports one
	// tree, not one per step).
	resume, cur, err := b.resume(ctx, steps, func(i int, format string, args ...any) {
		fmt.Fprintf(log, stepHead(steps, i)+": "+format+"\n", args...)
	})
	if err != nil {
		return Result{}, err
	}
	for i, ps := range steps {
		head := stepHead(steps, i)
		logf := func(format string, args ...any) { fmt.Fprintf(log, head+": "+format+"\n", args...) }
		start := time.Now()
		sr := StepResult{Key: ps.key, Kind: ps.kind}
		report(i+1, i, ps.kind)
		if i < resume {
			sr.Cached, sr.Digest = true, b.entryDigest(ps.key)
			if ps.kind == KindTemplate {
				sr.Digest = ps.base
			}
			if i == resume-1 {
				sr.Digest = cur.Digest
			}
			logf("CACHED")
			res.Steps = append(res.Steps, sr)
			cached++
			report(i+1, i+1, ps.kind)
			continue
		}
		if ps.kind == KindTemplate {
			if !b.Store.Has(ps.base) {
				return Result{}, fmt.Errorf("%s: base template %s: %w", head, ps.base, template.ErrNotFound)
			}
			if cur, err = b.loaded(ps.base); err != nil {
				return Result{}, fmt.Errorf("%s: %w", head, err)
			}
			sr.Cached, sr.Digest = true, cur.Digest
			logf("CACHED (template %s)", cur.Digest)
			res.Steps = append(res.Steps, sr)
			cached++
			report(i+1, i+1, ps.kind)
			continue
		}
		imp, hit, err := b.lookup(ctx, ps.key, logf)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", head, err)
		}
		if hit {
			cur = imp
			sr.Cached, sr.Digest = true, imp.Digest
			logf("CACHED")
			res.Steps = append(res.Steps, sr)
			cached++
			report(i+1, i+1, ps.kind)
			continue
		}
		logf("building")
		imp, err = b.execute(ctx, i+1, ps, cur, contextDir, log, opts.Sandbox)
		if err != nil {
			if se := (*StepError)(nil); errors.As(err, &se) {
				if se.Reason != "" {
					logf("failed: the command could not run: %s", se.Reason)
				} else {
					logf("failed: the command exited with status %d", se.ExitCode)
				}
				return Result{}, err
			}
			return Result{}, fmt.Errorf("%s: %w", head, err)
		}
		if err := b.store(ctx, ps.key, ps.kind, imp); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			b.logger().Error("recipe build cache: cannot record a step", "key", ps.key, "err", err)
			logf("warning: not cached: %v", err)
		}
		cur = imp
		sr.Digest = imp.Digest
		logf("built in %.1fs (%d files linked from the parent, %.1f MB read to hash)", time.Since(start).Seconds(), imp.LinkedFiles, float64(imp.HashedBytes)/1e6)
		res.Steps = append(res.Steps, sr)
		report(i+1, i+1, ps.kind)
	}
	res.Imported = cur
	return res, nil
}

// resume returns how many leading steps of the plan the cache answers and
// the template the last of them made (imported into the store if it lacks
// it): the last step with a usable cache entry. 0 when there is none, or
// when the recipe starts from a template the store does not hold (the
// steps then report that as before).
func (b *Builder) resume(ctx context.Context, steps []planStep, logf func(step int, format string, args ...any)) (int, template.Imported, error) {
	if steps[0].kind == KindTemplate && !b.Store.Has(steps[0].base) {
		return 0, template.Imported{}, nil
	}
	for k := len(steps) - 1; k >= 0 && steps[k].kind != KindTemplate; k-- {
		imp, hit, err := b.lookup(ctx, steps[k].key, func(format string, args ...any) { logf(k, format, args...) })
		if err != nil {
			return 0, template.Imported{}, fmt.Errorf("%s: %w", stepHead(steps, k), err)
		}
		if hit {
			return k + 1, imp, nil
		}
	}
	return 0, template.Imported{}, nil
}

// stepHead names step i of steps in logs and errors.
func stepHead(steps []planStep, i int) string {
	return fmt.Sprintf("step %d/%d %s %s", i+1, len(steps), steps[i].kind, short(steps[i].key))
}

// entryDigest is the digest key's cache entry records ("" when it has
// none: a step before a cached one may have been tidied away), and marks
// the entry used.
func (b *Builder) entryDigest(key string) model.TemplateDigest {
	e, ok, err := b.readEntry(key)
	if err != nil || !ok {
		return ""
	}
	b.touch(key)
	return e.Digest
}

// Cached reports whether r's final result is in the cache and in the store,
// without building or hashing any tree (the server uses it at start; copy
// sources in contextDir are hashed, since they are part of the keys).
func (b *Builder) Cached(r Recipe, contextDir string) (template.Imported, bool, error) {
	if err := b.check(); err != nil {
		return template.Imported{}, false, err
	}
	steps, err := b.plan(context.Background(), r, contextDir)
	if err != nil {
		return template.Imported{}, false, err
	}
	last := steps[len(steps)-1]
	var d model.TemplateDigest
	if last.kind == KindTemplate {
		d = last.base
	} else {
		e, ok, err := b.readEntry(last.key)
		if err != nil || !ok {
			return template.Imported{}, false, err
		}
		d = e.Digest
	}
	if !b.Store.Has(d) {
		return template.Imported{}, false, nil
	}
	imp, err := b.loaded(d)
	if err != nil {
		return template.Imported{}, false, err
	}
	return imp, true, nil
}

// execute builds step n (ps) on top of parent.
func (b *Builder) execute(ctx context.Context, n int, ps planStep, cur template.Imported, contextDir string, log io.Writer, sb Sandbox) (template.Imported, error) {
	if ps.kind == KindStart {
		return b.startStep(ctx, n, cur, log, sb)
	}
	if ps.sandboxed {
		return b.sandboxStep(ctx, n, ps, cur, log, sb)
	}
	parent := cur.Digest
	switch ps.kind {
	case KindDebian:
		return b.debian(ctx, ps, log)
	case KindConfig:
		cfg, err := b.config(parent)
		if err != nil {
			return template.Imported{}, err
		}
		cfg.Env = model.SetEnv(cfg.Env, ps.env)
		if ps.workdir != "" {
			cfg.WorkingDir = ps.workdir
		}
		if ps.user != "" {
			cfg.User = ps.user
		}
		if ps.start != (Start{}) {
			sc := ps.start.config()
			cfg.StartCmd, cfg.ReadyCmd, cfg.ReadyTimeoutMS = sc.StartCmd, sc.ReadyCmd, sc.ReadyTimeoutMS
		}
		return b.Store.ImportDirConfig(ctx, b.Store.RootfsDir(parent), cfg, nil)
	}
	return b.overlayStep(ctx, n, ps, parent, contextDir, log)
}

func (b *Builder) config(d model.TemplateDigest) (template.Config, error) {
	data, err := b.Store.Manifest(d)
	if err != nil {
		return template.Config{}, err
	}
	m, err := template.ParseManifest(data)
	if err != nil {
		return template.Config{}, err
	}
	return m.Config, nil
}

// overlayStep runs a copy, run or packages step: the parent's tree is the
// lower of an overlay mounted in the helper's private namespace, and the
// merged tree afterwards is imported as the step's template.
func (b *Builder) overlayStep(ctx context.Context, n int, ps planStep, parent model.TemplateDigest, contextDir string, log io.Writer) (template.Imported, error) {
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
	upper, work, merged := filepath.Join(st.Dir(), "upper"), filepath.Join(st.Dir(), "work"), filepath.Join(st.Dir(), "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return template.Imported{}, err
		}
	}
	// The merged root takes the upper root's owner and mode.
	if err := os.Lchown(upper, int(rootSt.Uid), int(rootSt.Gid)); err != nil {
		return template.Imported{}, err
	}
	if err := unix.Chmod(upper, rootSt.Mode&0o7777); err != nil {
		return template.Imported{}, err
	}
	env := runEnv(cfg.Env)
	h, rc, err := startHelper(ctx, []string{lower}, upper, work, merged, ps.argv, env, log)
	if err != nil {
		return template.Imported{}, err
	}
	imp, err := func() (template.Imported, error) {
		if rc != 0 {
			return template.Imported{}, &StepError{Step: n, Kind: ps.kind, ExitCode: rc}
		}
		if ps.kind == KindCopy {
			if err := b.copyStep(ctx, h.path(merged), contextDir, ps); err != nil {
				return template.Imported{}, err
			}
		}
		return b.Store.ImportLayered(ctx, h.path(merged), upper, parent, cfg, nil)
	}()
	if werr := h.wait(); werr != nil && err == nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			err = fmt.Errorf("build helper: %w", werr)
		}
	}
	return imp, err
}

func (b *Builder) copyStep(ctx context.Context, mergedPath, contextDir string, ps planStep) error {
	rootFd, err := unix.Open(mergedPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the merged tree: %w", err)
	}
	defer unix.Close(rootFd)
	src, err := os.OpenRoot(contextDir)
	if err != nil {
		return fmt.Errorf("recipe context directory: %w", err)
	}
	defer src.Close()
	sum, err := copyInto(ctx, rootFd, src, *ps.copy)
	if err != nil {
		return err
	}
	if sum != ps.copySum {
		return fmt.Errorf("copy %s: the context directory changed during the build", ps.copy.Src)
	}
	return nil
}

// runEnv is the environment of run steps: the parent template's, with
// PATH (model.DefaultPath, as the agent's processes get), HOME, LANG and
// DEBIAN_FRONTEND added when it does not set them.
func runEnv(env []string) []string {
	out := slices.Clone(env)
	for _, kv := range []string{"PATH=" + model.DefaultPath, "HOME=/root",
		"LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"} {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(out, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
			out = append(out, kv)
		}
	}
	return out
}

// debian bootstraps the base with mmdebstrap straight into a staging
// directory of the store, which then adopts the tree without copying it.
func (b *Builder) debian(ctx context.Context, ps planStep, log io.Writer) (template.Imported, error) {
	st, err := b.Store.NewStaged()
	if err != nil {
		return template.Imported{}, err
	}
	defer st.Remove()
	rootfs := st.Rootfs()
	// Readable by apt's download user, as a tree's root is anyway.
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return template.Imported{}, err
	}
	// mmdebstrap runs after drop_foreign_mounts (see there) has left
	// the namespace only the mounts the build may use.
	args := []string{"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "--",
		"/bin/sh", "-c", dropForeignMounts + `drop_foreign_mounts "$1"; shift; exec "$@"`, "airlock-build", rootfs,
		"mmdebstrap", "--mode=root", "--format=directory", "--variant=" + ps.debian.Variant}
	if len(ps.packages) > 0 {
		args = append(args, "--include="+strings.Join(ps.packages, ","))
	}
	args = append(args, ps.debian.Suite, rootfs)
	args = append(args, ps.mirrors...)
	runtime.LockOSThread() // for Pdeathsig, see startHelper
	defer runtime.UnlockOSThread()
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = hostEnv("SOURCE_DATE_EPOCH=" + sourceDateEpoch)
	lw := &lineWriter{w: log}
	cmd.Stdout, cmd.Stderr = lw, lw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
	lw.flush()
	if err != nil {
		if ctx.Err() != nil {
			return template.Imported{}, ctx.Err()
		}
		return template.Imported{}, fmt.Errorf("mmdebstrap %s: %w", ps.debian.Suite, err)
	}
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return template.Imported{}, err
	}
	if err := removeSpecialFiles(filepath.Join(rootfs, "dev")); err != nil {
		return template.Imported{}, err
	}
	if err := hostIndependent(rootfs); err != nil {
		return template.Imported{}, err
	}
	return st.Adopt(ctx, template.DefaultConfig(), "debian "+ps.debian.Suite)
}

// hostIndependent replaces what mmdebstrap copies from the host that the
// template should not carry: /etc/hostname (the build host's name) becomes
// "airlock". /etc/resolv.conf stays (a sandbox with network needs one) but
// gets mode 0644 (mmdebstrap keeps the host file's).
func hostIndependent(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove("etc/hostname"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := root.WriteFile("etc/hostname", []byte("airlock\n"), 0o644); err != nil {
		return err
	}
	if fi, err := root.Lstat("etc/resolv.conf"); err == nil && fi.Mode().IsRegular() {
		return root.Chmod("etc/resolv.conf", 0o644)
	}
	return nil
}

// removeSpecialFiles deletes the device nodes, fifos and sockets below dir
// (mmdebstrap populates /dev; templates hold no device nodes, sandboxes get
// their own /dev).
func removeSpecialFiles(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			return os.Remove(p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
