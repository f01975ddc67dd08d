package recipe

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// Builder builds recipes into templates of Store, caching every step's
// result in CacheDir (see cache.go).
type Builder struct {
	Store    *template.Store
	CacheDir string
	Logger   *slog.Logger
	// Resolve turns a template reference of "from: template:" (a name,
	// name:tag or sha256:…) into a digest of Store. When nil only digests
	// are accepted.
	Resolve func(ctx context.Context, ref string) (model.TemplateDigest, error)
}

// Result is what a build produced: the final template and one StepResult
// per step of the hash chain (the base first).
type Result struct {
	Imported template.Imported
	Steps    []StepResult
}

// StepResult is one step of a build.
type StepResult struct {
	Key    string // the step's cache key (hex SHA-256)
	Kind   string // "debian", "template", "packages", "copy", "run" or "config"
	Cached bool   // the result came from the cache
	Digest model.TemplateDigest
}

// errNotImplemented is returned by paths not finished yet.
var errNotImplemented = errors.New("recipe: not implemented yet")

// Build builds r, with copy sources read from contextDir, writing progress
// lines to log. Steps whose result is cached are not run again.
func (b *Builder) Build(ctx context.Context, r Recipe, contextDir string, log io.Writer) (Result, error) {
	return Result{}, errNotImplemented
}

// Cached reports whether r's final result is in the cache and in the store,
// without building or hashing any tree (the server uses it at start).
func (b *Builder) Cached(r Recipe, contextDir string) (template.Imported, bool, error) {
	return template.Imported{}, false, errNotImplemented
}
