// Package build runs template builds and imports in the background: a
// small pool of workers claims pending builds from the store (leased like
// operations, so a build left running by a dead server runs again at the
// next start), imports the source or runs the recipe, records the template,
// points the build's name at it, and writes the build's log to a bounded
// file under the data dir.
package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// Importer imports directories, tar archives and OCI images; *template.Store
// is one.
type Importer interface {
	ImportPath(ctx context.Context, path string, progress func(template.Progress)) (template.Imported, error)
	ImportImage(ctx context.Context, ref template.ImageRef, opts template.ImageOptions, progress func(template.Progress)) (template.Imported, error)
	// Guard holds off the removal of template trees (garbage collection)
	// until release is called: a build holds it from its start until its
	// template is recorded and named, so that neither a tree it reuses nor
	// a recipe's parent tree goes meanwhile.
	Guard(ctx context.Context) (release func(), err error)
}

// Distributor moves templates between this node's store and the blob
// store shared by nodes (*distribute.Distributor is one).
type Distributor interface {
	// Publish pushes a local template.
	Publish(ctx context.Context, d model.TemplateDigest) (blobstore.Digest, error)
	// Fetch pulls a template by digest unless it is here already; a
	// template the blob store lacks wraps template.ErrNotFound, one that
	// does not verify template.ErrCorrupt.
	Fetch(ctx context.Context, d model.TemplateDigest) (template.Imported, error)
}

// Step is one finished step of a recipe build.
type Step struct {
	Key    string
	Kind   string
	Cached bool
}

// RecipeBuilder builds recipes. text is the recipe's YAML, or "" for the
// server's default recipe; copy sources are relative to contextDir (may be
// ""). The build's log goes to log; progress is called as steps start and
// end. sb runs the commands of steps on a template base (nil: such
// recipes fail with not_supported).
type RecipeBuilder interface {
	BuildRecipe(ctx context.Context, text, contextDir string, log io.Writer, progress func(StepProgress), sb recipe.Sandbox) (template.Imported, []Step, error)
}

// Sandboxes gives the build sandbox of build b: run steps on a template
// base run in sandboxes of b's project, with its egress policy.
type Sandboxes interface {
	For(b model.TemplateBuild) recipe.Sandbox
}

// StepProgress is how far a recipe build is: Done steps of Total ended,
// Cached of them from the cache.
type StepProgress struct {
	Done, Cached, Total int
}

// Progress is what a running build has done so far (kept in memory by the
// runner that runs it).
type Progress struct {
	StepsDone, StepsCached, StepsTotal int
	Entries                            int   // entries imported
	Bytes                              int64 // file bytes imported
}

// MaxAttempts bounds how often a build is started: a build that was
// interrupted this many times (each time its server died) fails.
const MaxAttempts = 3

// Config configures a Runner.
type Config struct {
	Store     store.Store
	Templates Importer
	Recipes   RecipeBuilder // nil: recipe builds fail with not_supported
	// Sandboxes makes the build sandboxes of recipes' run steps on
	// template bases; nil: those recipes fail with not_supported.
	Sandboxes Sandboxes
	// Distribution, if set, gets every template a build makes (pushed
	// before the build succeeds) and serves "sha256:…" sources; nil: such
	// sources fail with not_supported.
	Distribution Distributor
	// RegistryTransport carries image pulls from registries; nil:
	// go-containerregistry's default (the system's CA certificates, or
	// SSL_CERT_FILE).
	RegistryTransport http.RoundTripper
	LogDir            string        // build logs, LogPath(LogDir, id)
	Owner             model.NodeID  // lease holder: this node
	Workers           int           // concurrent builds; default 1
	Lease             time.Duration // default 1 minute, renewed every third of it
	// Poll is how often an idle runner looks for a build without a
	// wake-up from the store (WatchBuilds): for the leases of other nodes
	// that expire, and for a notification that was lost. Default
	// DefaultPoll.
	Poll   time.Duration
	Logger *slog.Logger
}

// Runner runs template builds. Run it with Run; it stops when Run's context
// ends.
type Runner struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	progress map[model.BuildID]Progress
	auths    regAuths // registry credentials of builds, in memory
}

// New checks cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.Templates == nil || cfg.LogDir == "" || cfg.Owner == "" {
		return nil, errors.New("template build: Store, Templates, LogDir and Owner are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg, log: cfg.Logger, progress: map[model.BuildID]Progress{}}, nil
}

// LogDir is where the runner writes build logs.
func (r *Runner) LogDir() string { return r.cfg.LogDir }

// Progress returns the progress of a build this runner is running.
func (r *Runner) Progress(id model.BuildID) (Progress, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.progress[id]
	return p, ok
}

func (r *Runner) setProgress(id model.BuildID, f func(*Progress)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.progress[id]
	f(&p)
	r.progress[id] = p
}

// Run releases the leases this node held before (a previous process that
// died mid-build), then runs builds until ctx ends. Builds interrupted by
// the end of ctx are left running in the store; the next start runs them
// again.
func (r *Runner) Run(ctx context.Context) error {
	if n, err := r.cfg.Store.ReleaseBuildLeases(ctx, r.cfg.Owner, time.Now()); err != nil {
		return fmt.Errorf("release build leases: %w", err)
	} else if n > 0 {
		r.log.Warn("builds left running by a previous process run again", "count", n)
	}
	r.work(ctx)
	return nil
}

// DefaultPoll is Config.Poll's default.
const DefaultPoll = 5 * time.Second

// work claims builds while a worker is free and runs each in its own
// goroutine (at most Workers at once) until ctx ends, then waits for them.
// With nothing to claim it sleeps until builds change (WatchBuilds) or
// Config.Poll passes, and it claims (a write transaction) only after a
// read found a build to claim. One loop claims, so a queued build costs
// one claim, not one per idle worker.
func (r *Runner) work(ctx context.Context) {
	changed := r.cfg.Store.WatchBuilds(ctx)
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	slots := make(chan struct{}, r.cfg.Workers)
	var running sync.WaitGroup
	defer running.Wait()
	for {
		select { // a free worker
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		b, err := r.claim(ctx)
		if err == nil {
			running.Add(1)
			go func() {
				defer running.Done()
				defer func() { <-slots }()
				r.run(ctx, b)
			}()
			continue
		}
		<-slots
		if !errors.Is(err, store.ErrNoWork) && ctx.Err() == nil {
			r.log.Warn("claim build", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// claim takes the next build, ErrNoWork when there is none. A read says
// first whether there is one: a claim that finds nothing costs a write
// transaction (on SQLite the database's one writer).
func (r *Runner) claim(ctx context.Context) (model.TemplateBuild, error) {
	now := time.Now()
	ok, err := r.cfg.Store.BuildClaimable(ctx, now)
	if err != nil {
		return model.TemplateBuild{}, err
	}
	if !ok {
		return model.TemplateBuild{}, store.ErrNoWork
	}
	return r.cfg.Store.ClaimBuild(ctx, store.Claim{Owner: r.cfg.Owner, Lease: r.cfg.Lease, Now: now})
}

// run runs one claimed build and finishes it.
func (r *Runner) run(ctx context.Context, b model.TemplateBuild) {
	log := r.log.With("build", b.ID, "kind", b.Kind, "source", b.Source, "name", b.Name)
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.renew(bctx, b.ID, cancel)
	}()
	r.setProgress(b.ID, func(*Progress) {})
	defer r.auths.set(b.ID, "", "", time.Time{})
	defer func() {
		r.mu.Lock()
		delete(r.progress, b.ID)
		r.mu.Unlock()
	}()

	lf, err := openLog(r.cfg.LogDir, b.ID, MaxLogBytes)
	if err != nil {
		log.Error("build log", "err", err)
		r.finish(ctx, log, b, template.Imported{}, &model.BuildError{Code: apiv1.CodeInternal, Message: err.Error()})
		return
	}
	if b.Attempts > 1 {
		lf.Printf("airlock: build %s runs again (attempt %d): the server that ran it stopped", b.ID, b.Attempts)
	}
	lf.Printf("airlock: %s %s%s", b.Kind, b.Source, nameSuffix(b.Name))
	log.Info("build started", "attempt", b.Attempts)
	var (
		imp     template.Imported
		buildEr *model.BuildError
	)
	if b.Attempts > MaxAttempts {
		buildEr = &model.BuildError{Code: apiv1.CodeBuildFailed,
			Message: fmt.Sprintf("the build was interrupted %d times (its server stopped each time); not starting it again", b.Attempts-1)}
	} else {
		release, gerr := r.cfg.Templates.Guard(bctx)
		if gerr != nil {
			err = fmt.Errorf("template store: %w", gerr)
		} else {
			defer release() // after finish has named the template
			imp, err = r.build(bctx, b, lf)
		}
		if err == nil && r.cfg.Distribution != nil && !isDigestSource(b) {
			// Pushed before it is recorded, so that no node finds it in the
			// store but not in the blob store; a pulled template is there
			// already.
			if _, perr := r.cfg.Distribution.Publish(bctx, imp.Digest); perr != nil {
				err = fmt.Errorf("%w: template %s was made on this node but could not be pushed (build again to retry): %w", errBlobStore, imp.Digest, perr)
			} else {
				lf.Printf("airlock: pushed %s to the blob store", imp.Digest)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				// The server is stopping: leave the build running in the
				// store; the next start runs it again (from the cache).
				lf.Printf("airlock: interrupted: the server is stopping; the build runs again when it starts")
				_ = lf.Close()
				log.Info("build interrupted by shutdown")
				return
			}
			if c := context.Cause(bctx); c != nil && !errors.Is(c, context.Canceled) {
				err = c
			}
			_, authed := r.auths.get(b.ID)
			buildEr = classify(b.Source, authed, err)
		}
	}
	if buildEr != nil {
		lf.Printf("airlock: failed (%s): %s", buildEr.Code, buildEr.Message)
	} else {
		lf.Printf("airlock: succeeded: %s%s (%d bytes, %d entries)", imp.Digest, nameSuffix(b.Name), imp.SizeBytes, imp.Entries)
	}
	if err := lf.Close(); err != nil {
		log.Warn("close build log", "err", err)
	}
	r.finish(ctx, log, b, imp, buildEr)
}

func nameSuffix(n model.TaggedName) string {
	if n.IsZero() {
		return ""
	}
	return " → " + n.String()
}

func (r *Runner) finish(ctx context.Context, log *slog.Logger, b model.TemplateBuild, imp template.Imported, be *model.BuildError) {
	now := time.Now()
	f := store.BuildFinish{ID: b.ID, Owner: r.cfg.Owner, State: model.BuildSucceeded, Digest: imp.Digest, Now: now,
		Template: &model.Template{Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: now}}
	if be != nil {
		f.State, f.Error, f.Digest, f.Template = model.BuildFailed, be, "", nil
	}
	if err := r.cfg.Store.FinishBuild(context.WithoutCancel(ctx), f); err != nil {
		log.Error("finish build", "err", err)
		return
	}
	if be != nil {
		log.Warn("build failed", "code", be.Code, "err", be.Message)
		return
	}
	log.Info("build succeeded", "digest", imp.Digest, "bytes", imp.SizeBytes, "reused", imp.Reused)
}

// renew keeps the lease of build id until ctx ends; a lost lease cancels
// the build.
func (r *Runner) renew(ctx context.Context, id model.BuildID, cancel context.CancelCauseFunc) {
	t := time.NewTicker(r.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.cfg.Store.RenewBuildLease(ctx, id, store.Claim{Owner: r.cfg.Owner, Lease: r.cfg.Lease, Now: time.Now()})
		if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound) {
			cancel(fmt.Errorf("the build's lease was lost: %w", err))
			return
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("renew build lease", "build", id, "err", err)
		}
	}
}

// build runs b, writing its log to lf.
func (r *Runner) build(ctx context.Context, b model.TemplateBuild, lf *logFile) (template.Imported, error) {
	switch b.Kind {
	case model.BuildImport:
		progress := func(p template.Progress) {
			r.setProgress(b.ID, func(q *Progress) { q.Entries, q.Bytes = p.Entries, p.Bytes })
		}
		var (
			imp template.Imported
			err error
		)
		switch {
		case isDigestSource(b):
			imp, err = r.fetch(ctx, model.TemplateDigest(b.Source))
		case strings.HasPrefix(b.Source, "/"):
			imp, err = r.cfg.Templates.ImportPath(ctx, b.Source, progress)
		default:
			ref, perr := template.ParseImageRef(b.Source)
			if perr != nil {
				return template.Imported{}, perr
			}
			// Anonymous access unless the build came with credentials
			// (this node's memory); plain HTTP only to loopback registries.
			opts := template.ImageOptions{Transport: r.cfg.RegistryTransport, Keychain: r.keychainFor(b.ID, ref.Registry())}
			if opts.Keychain != nil {
				lf.Printf("airlock: pulling with the credentials given for %s", ref.Registry())
			}
			imp, err = r.cfg.Templates.ImportImage(ctx, ref, opts, progress)
		}
		if err != nil {
			return template.Imported{}, err
		}
		lf.Printf("airlock: imported %d entries, %d bytes%s", imp.Entries, imp.SizeBytes, reusedNote(imp.Reused))
		return imp, nil
	case model.BuildRecipe:
		if r.cfg.Recipes == nil {
			return template.Imported{}, fmt.Errorf("%w: this server cannot build recipes", errNotSupported)
		}
		var sb recipe.Sandbox
		if r.cfg.Sandboxes != nil {
			sb = r.cfg.Sandboxes.For(b)
		}
		imp, steps, err := r.cfg.Recipes.BuildRecipe(ctx, b.Recipe, b.Context, lf, func(p StepProgress) {
			r.setProgress(b.ID, func(q *Progress) { q.StepsDone, q.StepsCached, q.StepsTotal = p.Done, p.Cached, p.Total })
			if err := r.cfg.Store.SetBuildProgress(ctx, b.ID, r.cfg.Owner, p.Done, p.Cached, p.Total, time.Now()); err != nil && ctx.Err() == nil {
				r.log.Warn("record build progress", "build", b.ID, "err", err)
			}
		}, sb)
		if err != nil {
			return template.Imported{}, err
		}
		cached := 0
		for _, s := range steps {
			if s.Cached {
				cached++
			}
		}
		r.setProgress(b.ID, func(q *Progress) { q.StepsDone, q.StepsCached, q.StepsTotal = len(steps), cached, len(steps) })
		if err := r.cfg.Store.SetBuildProgress(ctx, b.ID, r.cfg.Owner, len(steps), cached, len(steps), time.Now()); err != nil {
			return template.Imported{}, err
		}
		return imp, nil
	}
	return template.Imported{}, fmt.Errorf("%w: unknown build kind %q", model.ErrInvalid, b.Kind)
}

var errNotSupported = errors.New("not supported")

// isDigestSource reports whether b pulls a template by digest from the
// blob store.
func isDigestSource(b model.TemplateBuild) bool {
	return b.Kind == model.BuildImport && strings.HasPrefix(b.Source, "sha256:")
}

// fetch pulls template d from the blob store.
func (r *Runner) fetch(ctx context.Context, d model.TemplateDigest) (template.Imported, error) {
	if _, err := model.ParseTemplateDigest(string(d)); err != nil {
		return template.Imported{}, err
	}
	if r.cfg.Distribution == nil {
		return template.Imported{}, fmt.Errorf("%w: this server has no blob store to pull %s from (start it with --blob-store)", errNotSupported, d)
	}
	imp, err := r.cfg.Distribution.Fetch(ctx, d)
	switch {
	case err == nil, errors.Is(err, template.ErrNotFound), errors.Is(err, template.ErrCorrupt), ctx.Err() != nil:
		return imp, err
	}
	return imp, fmt.Errorf("%w: %w", errBlobStore, err)
}

// errBlobStore wraps a failure to reach or read the blob store.
var errBlobStore = errors.New("the blob store failed")

func reusedNote(reused bool) string {
	if reused {
		return " (already in the store)"
	}
	return ""
}
