package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// TemplateBuildOptions configure RunTemplateBuild.
type TemplateBuildOptions struct {
	TempDir  string       // where the throwaway stores and cache go; "" is os.TempDir()
	Peer     bool         // also time a bare mmdebstrap of the same packages
	Progress io.Writer    // a line per phase; nil: none
	Logger   *slog.Logger // the recipe builder's logs; nil: none
}

// TemplateBuildReport is what `airlock bench template-build` measured: the
// server's default recipe (Debian 12 with python3, node, git, …) built
// cold, again with its build cache, looked up as a server start does, and
// into a fresh store from the cache alone; beside it, as the peer, a bare
// mmdebstrap of the same packages.
type TemplateBuildReport struct {
	Recipe        string  `json:"recipe"`
	Digest        string  `json:"digest"`
	Steps         int     `json:"steps"`
	TreeBytes     int64   `json:"tree_bytes"`
	CacheBytes    int64   `json:"cache_bytes"`
	ColdSeconds   float64 `json:"cold_seconds"`         // empty cache, empty store
	CachedSeconds float64 `json:"cached_seconds"`       // the same cache and store: every step a hit
	LookupSeconds float64 `json:"start_lookup_seconds"` // Builder.Cached: what a server start pays
	// CacheOnlySeconds: a fresh store and the same cache (a new data dir
	// on a host that built before): every step imported from the cache.
	CacheOnlySeconds float64 `json:"cache_only_seconds"`
	// PeerSeconds is a bare mmdebstrap of the same suite, variant and
	// packages into a directory (0: not run).
	PeerSeconds float64 `json:"mmdebstrap_seconds,omitempty"`
}

// RunTemplateBuild measures the default recipe's build. It needs root and
// mmdebstrap, reaches the host's apt sources, and removes everything it
// made when it returns.
func RunTemplateBuild(ctx context.Context, opts TemplateBuildOptions) (TemplateBuildReport, error) {
	if os.Geteuid() != 0 {
		return TemplateBuildReport{}, ErrNotRoot
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return TemplateBuildReport{}, fmt.Errorf("bench template-build needs mmdebstrap (apt-get install mmdebstrap): %w", err)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	tmp, err := os.MkdirTemp(opts.TempDir, "airlock-bench-build-")
	if err != nil {
		return TemplateBuildReport{}, err
	}
	defer os.RemoveAll(tmp)
	cacheDir := filepath.Join(tmp, "cache")
	if err := os.Mkdir(cacheDir, 0o700); err != nil {
		return TemplateBuildReport{}, err
	}
	builder := func(store string) (*recipe.Builder, error) {
		ts, err := template.Open(filepath.Join(tmp, store), opts.Logger)
		if err != nil {
			return nil, err
		}
		return &recipe.Builder{Store: ts, CacheDir: cacheDir, Logger: opts.Logger}, nil
	}
	def := recipe.Default()
	rep := TemplateBuildReport{Recipe: "default"}

	a, err := builder("store-a")
	if err != nil {
		return rep, err
	}
	build := func(phase string, b *recipe.Builder) (recipe.Result, float64, error) {
		fmt.Fprintf(opts.Progress, "bench: %s build of the default recipe…\n", phase)
		start := time.Now()
		res, err := b.Build(ctx, def, "", io.Discard)
		secs := time.Since(start).Seconds()
		if err != nil {
			return res, secs, fmt.Errorf("%s build: %w", phase, err)
		}
		fmt.Fprintf(opts.Progress, "bench: %s build: %.1f s, %s\n", phase, secs, res.Imported.Digest)
		return res, secs, nil
	}
	cold, secs, err := build("cold", a)
	if err != nil {
		return rep, err
	}
	rep.ColdSeconds, rep.Digest, rep.Steps, rep.TreeBytes = secs, cold.Imported.Digest.String(), len(cold.Steps), cold.Imported.SizeBytes

	again, secs, err := build("cached", a)
	if err != nil {
		return rep, err
	}
	rep.CachedSeconds = secs
	for _, s := range again.Steps {
		if !s.Cached {
			return rep, fmt.Errorf("cached build: step %s (%s) was built again", s.Key, s.Kind)
		}
	}

	start := time.Now()
	hit, ok, err := a.Cached(def, "")
	rep.LookupSeconds = time.Since(start).Seconds()
	if err != nil || !ok || hit.Digest != cold.Imported.Digest {
		return rep, fmt.Errorf("start lookup: %v, hit %v, digest %s (want %s)", err, ok, hit.Digest, cold.Imported.Digest)
	}

	b, err := builder("store-b")
	if err != nil {
		return rep, err
	}
	fromCache, secs, err := build("cache-only", b)
	if err != nil {
		return rep, err
	}
	rep.CacheOnlySeconds = secs
	if fromCache.Imported.Digest != cold.Imported.Digest || again.Imported.Digest != cold.Imported.Digest {
		return rep, fmt.Errorf("the builds disagree: cold %s, cached %s, cache-only %s",
			cold.Imported.Digest, again.Imported.Digest, fromCache.Imported.Digest)
	}
	if rep.CacheBytes, err = dirBytes(cacheDir); err != nil {
		return rep, err
	}

	if opts.Peer {
		fmt.Fprintf(opts.Progress, "bench: peer: bare mmdebstrap of the same packages…\n")
		if rep.PeerSeconds, err = bareMmdebstrap(ctx, def, filepath.Join(tmp, "peer")); err != nil {
			return rep, err
		}
		fmt.Fprintf(opts.Progress, "bench: peer: %.1f s\n", rep.PeerSeconds)
	}
	return rep, nil
}

// bareMmdebstrap times mmdebstrap alone making r's Debian base with its
// packages in dir: what a build costs without Airlock's cache, hashing and
// store.
func bareMmdebstrap(ctx context.Context, r recipe.Recipe, dir string) (float64, error) {
	deb, _ := r.Base()
	if deb == nil {
		return 0, errors.New("the default recipe has no Debian base")
	}
	args := []string{"--mode=root", "--format=directory", "--variant=" + deb.Variant, "--quiet"}
	if pkgs := r.Packages(); len(pkgs) > 0 {
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	args = append(args, deb.Suite, dir)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	secs := time.Since(start).Seconds()
	if err != nil {
		return secs, fmt.Errorf("mmdebstrap: %w: %s", err, tailOf(string(out), 2000))
	}
	return secs, nil
}

// dirBytes sums the sizes of the regular files below dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// WriteJSON writes the report as JSON.
func (r TemplateBuildReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r TemplateBuildReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "template build: recipe %s, %d steps, %s, %.0f MB tree, %.0f MB build cache\n",
		r.Recipe, r.Steps, r.Digest, float64(r.TreeBytes)/1e6, float64(r.CacheBytes)/1e6)
	fmt.Fprintln(tw, "phase\tseconds\t")
	fmt.Fprintf(tw, "cold (empty cache and store)\t%.2f\t\n", r.ColdSeconds)
	fmt.Fprintf(tw, "cached (same cache and store)\t%.3f\t\n", r.CachedSeconds)
	fmt.Fprintf(tw, "server start lookup\t%.4f\t\n", r.LookupSeconds)
	fmt.Fprintf(tw, "fresh store, shared cache\t%.2f\t\n", r.CacheOnlySeconds)
	if r.PeerSeconds > 0 {
		fmt.Fprintf(tw, "peer: bare mmdebstrap\t%.2f\t\n", r.PeerSeconds)
		fmt.Fprintf(tw, "cold / peer\t%.2f×\t\n", r.ColdSeconds/r.PeerSeconds)
	}
	return tw.Flush()
}
