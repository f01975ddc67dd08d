package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/build"
	"github.com/airlockdev/airlock/internal/template/distribute"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// MinimalTemplateName names the busybox template, tagged minimalTemplate
// ("minimal:latest").
const MinimalTemplateName model.TemplateName = "minimal"

var minimalTemplate = model.TaggedName{Name: MinimalTemplateName, Tag: model.DefaultTemplateTag}

// ensureMinimalTemplate builds the busybox template (remembered: a restart
// neither runs busybox nor hashes the tree again) and points names at it.
// Without a static busybox there is none; the server still runs and says
// how to get one.
func ensureMinimalTemplate(ctx context.Context, st store.Store, templates *template.Store, def *defaultTag, log *slog.Logger, names ...model.TaggedName) error {
	bb := ""
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			bb = p
			break
		}
	}
	if bb == "" {
		log.Warn("no static busybox found: the minimal template is unavailable (install the busybox-static package, or import a template)")
		return nil
	}
	release, err := templates.Guard(ctx) // until recorded: see template.Store.Guard
	if err != nil {
		return fmt.Errorf("minimal template: %w", err)
	}
	defer release()
	imp, err := templates.EnsureDefault(ctx, bb)
	if err != nil {
		log.Warn("minimal template unavailable", "err", err)
		return nil
	}
	if err := recordReady(ctx, st, def, imp, names...); err != nil {
		return fmt.Errorf("minimal template: %w", err)
	}
	log.Info("minimal template ready", "digest", imp.Digest, "names", names)
	return nil
}

// recordReady records a template that is on disk and points names at it
// ("default" through def, which remembers the server's choice). The caller
// holds the template store's Guard.
func recordReady(ctx context.Context, st store.Store, def *defaultTag, imp template.Imported, names ...model.TaggedName) error {
	now := time.Now()
	if err := st.PutTemplate(ctx, model.Template{Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: now}); err != nil {
		return fmt.Errorf("record %s: %w", imp.Digest, err)
	}
	for _, n := range names {
		if n == model.DefaultTemplate {
			if err := def.set(ctx, imp.Digest, now); err != nil {
				return err
			}
			continue
		}
		if err := st.SetTemplateName(ctx, n, imp.Digest, now); err != nil {
			return fmt.Errorf("name %s: %w", n, err)
		}
	}
	return nil
}

// DefaultBuildSource is the source of the server's default build.
const DefaultBuildSource = "default"

// ensureDebianDefault names "default" at once when the default recipe's
// build is cached; otherwise it queues its build (unless one is queued or
// running already, as after a restart mid-build), which names "default"
// when it is done. The server does not wait for it.
func ensureDebianDefault(ctx context.Context, st store.Store, b *recipe.Builder, def *defaultTag, log *slog.Logger) error {
	if moved, err := def.moved(ctx); err != nil || moved {
		return err
	}
	release, err := b.Store.Guard(ctx) // until recorded: see template.Store.Guard
	if err != nil {
		return fmt.Errorf("default template: %w", err)
	}
	defer release()
	imp, ok, err := b.Cached(recipe.Default(), "")
	if err != nil {
		log.Warn("default recipe cache lookup failed; building it", "err", err)
	}
	if ok {
		if err := recordReady(ctx, st, def, imp, model.DefaultTemplate); err != nil {
			return fmt.Errorf("default template: %w", err)
		}
		log.Info("default template ready (cached build)", "digest", imp.Digest)
		return nil
	}
	page, err := st.ListBuilds(ctx, store.BuildQuery{Scope: store.AllProjects(), Name: model.DefaultTemplate, States: []model.BuildState{model.BuildPending, model.BuildRunning}, Limit: 1})
	if err != nil {
		return fmt.Errorf("default template builds: %w", err)
	}
	if len(page.Builds) > 0 {
		log.Info("the default template's build is under way", "build", page.Builds[0].ID)
		return nil
	}
	bld := model.TemplateBuild{ID: model.NewBuildID(), Kind: model.BuildRecipe, Source: DefaultBuildSource,
		Name: model.DefaultTemplate, CreatedAt: time.Now()}
	if err := st.CreateBuild(ctx, bld, nil); err != nil {
		return fmt.Errorf("queue the default template's build: %w", err)
	}
	log.Info("default template (Debian) building in the background; creates that need it wait for it",
		"build", bld.ID, "follow", "airlock build log "+bld.ID.String())
	return nil
}

// buildsDir holds the build logs, DATA/builds/<id>.log.
const buildsDir = "builds"

// startBuilds makes the template build runner (not yet running) and sets
// up the templates named "minimal" and "default" as opts.DefaultTemplate
// says.
func startBuilds(ctx context.Context, opts Options, dd *dataDir, st store.Store, templates *template.Store, dist *distribute.Distributor, node model.NodeID, sbx build.Sandboxes, log *slog.Logger) (*build.Runner, error) {
	cacheDir := opts.BuildCacheDir
	if cacheDir == "" {
		cacheDir = dd.join("build-cache")
	}
	builder := &recipe.Builder{
		Store:    templates,
		CacheDir: cacheDir,
		Logger:   log.With("component", "recipe"),
		Resolve: func(ctx context.Context, ref string) (model.TemplateDigest, error) {
			r, err := model.ParseTemplateRef(ref)
			if err != nil {
				return "", err
			}
			t, err := st.ResolveTemplate(ctx, r)
			if err != nil {
				return "", fmt.Errorf("template %s: %w", ref, err)
			}
			return t.Digest, nil
		},
	}
	regTransport, err := registryTransport(opts.RegistryCA)
	if err != nil {
		return nil, err
	}
	runner, err := build.New(build.Config{
		RegistryTransport: regTransport,
		Store:             st,
		Templates:         templates,
		Recipes:           build.Recipes{Builder: builder},
		Sandboxes:         sbx,
		LogDir:            dd.join(buildsDir),
		Owner:             node,
		// Two at once: an import need not wait for the Debian build.
		Workers:      2,
		Distribution: distribution(dist),
		Logger:       log.With("component", "builds"),
	})
	if err != nil {
		return nil, err
	}
	def := &defaultTag{st: st, file: dd.join(defaultTagFile), has: templates.Has, log: log}
	switch opts.DefaultTemplate {
	case DefaultTemplateMinimal:
		names := []model.TaggedName{minimalTemplate}
		moved, merr := def.moved(ctx)
		if merr != nil {
			return nil, merr
		}
		if !moved {
			names = append(names, model.DefaultTemplate)
		}
		err = ensureMinimalTemplate(ctx, st, templates, def, log, names...)
	case DefaultTemplateDebian, "":
		if err = ensureMinimalTemplate(ctx, st, templates, def, log, minimalTemplate); err == nil {
			err = ensureDebianDefault(ctx, st, builder, def, log)
		}
	default:
		err = fmt.Errorf("--default-template must be %s or %s, not %q", DefaultTemplateDebian, DefaultTemplateMinimal, opts.DefaultTemplate)
	}
	if err != nil {
		return nil, err
	}
	return runner, nil
}

// defaultTagFile (in the data dir) holds the digest the server last
// pointed "default" at.
const defaultTagFile = "default-template"

// defaultTag is the server's hold on the tag "default": it points it at its
// choice (--default-template) at every start, unless an operator has moved
// it since (airlock template tag …), which it then leaves alone.
type defaultTag struct {
	st   store.Store
	file string
	has  func(model.TemplateDigest) bool // the template is on this node
	log  *slog.Logger
}

// moved reports whether "default" points at a template the server did not
// point it at: neither the digest it named last (the file) nor one a
// default build made that this node holds (its own build, or one from
// before the file existed). A default named by another node sharing the
// database counts as moved: this node leaves it.
func (d *defaultTag) moved(ctx context.Context) (bool, error) {
	t, err := d.st.ResolveTemplate(ctx, model.RefByName(model.DefaultTemplate))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("default template: %w", err)
	}
	last, err := os.ReadFile(d.file)
	switch {
	case err == nil && strings.TrimSpace(string(last)) == t.Digest.String():
		return false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("default template: %w", err)
	}
	named := err == nil // this server named default before
	page, err := d.st.ListBuilds(ctx, store.BuildQuery{Scope: store.AllProjects(), Name: model.DefaultTemplate, States: []model.BuildState{model.BuildSucceeded}, Limit: 100})
	if err != nil {
		return false, fmt.Errorf("default template builds: %w", err)
	}
	for _, b := range page.Builds {
		// A default build's result is the server's own choice — if this
		// server made it or holds it: another node's is not to be
		// rebuilt here.
		if b.Source == DefaultBuildSource && b.Digest == t.Digest && (named || (d.has != nil && d.has(t.Digest))) {
			return false, nil
		}
	}
	if !named {
		// Named before this server ever named it: by another node
		// sharing the database, or an operator. Template names are
		// global; a node that joins does not re-point them.
		d.log.Info("the template tag default is named already (by another node or an operator); this server leaves it", "digest", t.Digest)
		return true, nil
	}
	d.log.Info("the template tag default was moved by an operator; the server leaves it", "digest", t.Digest)
	return true, nil
}

// set points "default" at digest and remembers that the server did.
func (d *defaultTag) set(ctx context.Context, digest model.TemplateDigest, now time.Time) error {
	if err := d.st.SetTemplateName(ctx, model.DefaultTemplate, digest, now); err != nil {
		return fmt.Errorf("name default template: %w", err)
	}
	if err := atomicfile.Write(d.file, []byte(digest.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("default template: %w", err)
	}
	return nil
}

// registryTransport carries image pulls: go-containerregistry's default,
// trusting the CA certificates in the PEM file caFile besides the
// system's; nil when caFile is "".
func registryTransport(caFile string) (http.RoundTripper, error) {
	if caFile == "" {
		return nil, nil
	}
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--registry-ca: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("--registry-ca: %s holds no PEM certificate", caFile)
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}
