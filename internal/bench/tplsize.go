package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
	"github.com/airlockdev/airlock/internal/server"
	"github.com/airlockdev/airlock/internal/template"
)

// TemplateSizeOptions configure RunTemplateSize.
type TemplateSizeOptions struct {
	// LargeBytes is how much file data the large template adds to the
	// default one (default DefaultLargeTemplateBytes).
	LargeBytes int64
	// CacheDir keeps the template store the servers share across runs, so
	// that the large template is generated and imported only once per
	// content (default DefaultCacheDir()).
	CacheDir string
}

// DefaultLargeTemplateBytes is the default data added to the large template.
const DefaultLargeTemplateBytes = 1 << 30

// largeFileBytes is the size of each data file of the large template.
const largeFileBytes = 64 << 20

// largeRecipe versions how the large template is generated: change it with
// generateLarge's output.
const largeRecipe = "bench-large-v1"

// largeName is the name the large template gets on the bench's servers.
const largeName = "bench-large"

// DefaultCacheDir is $AIRLOCK_BENCH_CACHE, else /var/cache/airlock-bench.
func DefaultCacheDir() string {
	if d := os.Getenv("AIRLOCK_BENCH_CACHE"); d != "" {
		return d
	}
	return "/var/cache/airlock-bench"
}

// RunTemplateSize runs `airlock bench template-size`: create → first output
// of `echo hello` from the default (busybox, about 2 MB) template and from a
// large one (the same tree plus LargeBytes of incompressible files under
// /opt/bench-data), side by side in the same rounds, on each runtime of
// cfg.Runtimes, and the large template's p50 and p95 over the small one's
// (the target is at most 1.1: creating a sandbox must not cost more for a
// larger template). Raw peers are not run (cfg.Peers is ignored).
//
// The servers share one template store in the cache directory (their data
// dirs' templates/ is a symbolic link to it): the large template is
// generated and imported into it once, remembered by its recipe, size and
// base template, and registered on each server by digest through a
// file:// blob store in the cache directory, which finds it present and
// imports nothing.
func RunTemplateSize(ctx context.Context, cfg Config, opts TemplateSizeOptions) (Report, error) {
	if opts.LargeBytes == 0 {
		opts.LargeBytes = DefaultLargeTemplateBytes
	}
	if opts.LargeBytes < 0 {
		return Report{}, fmt.Errorf("bench: the large template's size must be positive, not %d", opts.LargeBytes)
	}
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir()
	}
	cache, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return Report{}, err
	}
	cfg.Peers = nil
	return runWith(ctx, cfg, func(b *benchmark, ctx context.Context) (Report, error) {
		return b.runTemplateSize(ctx, cache, opts.LargeBytes)
	})
}

func (b *benchmark) runTemplateSize(ctx context.Context, cache string, largeBytes int64) (Report, error) {
	started := time.Now().UTC()
	storeDir := filepath.Join(cache, "templates")
	blobDir := filepath.Join(cache, "blobs")
	// 0711: the sandboxes' unprivileged roots traverse to the template trees.
	for _, d := range []string{cache, storeDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return Report{}, fmt.Errorf("bench: cache: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return Report{}, fmt.Errorf("bench: cache: %w", err)
		}
	}
	b.progressf("template cache %s (kept between runs)", cache)
	b.prepareServer = func(dir string, opts *server.Options) error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.Symlink(storeDir, filepath.Join(dir, "templates")); err != nil {
			return err
		}
		opts.BlobStore = "file://" + blobDir
		return nil
	}
	first, err := b.startServers(ctx)
	if err != nil {
		return Report{}, err
	}
	small, err := first.defaultTemplate(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("bench: %w", err)
	}
	store, err := template.Open(storeDir, b.cfg.Logger)
	if err != nil {
		return Report{}, fmt.Errorf("bench: %w", err)
	}
	large, err := b.ensureLarge(ctx, store, cache, small, largeBytes)
	if err != nil {
		return Report{}, err
	}
	smallImp, err := store.Get(small)
	if err != nil {
		return Report{}, fmt.Errorf("bench: %w", err)
	}
	largeImp, err := store.Get(large)
	if err != nil {
		return Report{}, fmt.Errorf("bench: %w", err)
	}
	servers := append([]subject(nil), b.subjects...)
	for _, s := range servers {
		a := s.(*airlockSubject)
		if _, err := a.c.ImportTemplate(ctx, apiv1.ImportTemplateRequest{Source: large.String(), Name: largeName}); err != nil {
			return Report{}, fmt.Errorf("bench: airlock-%s: register the large template: %w", a.flavor, err)
		}
		b.subjects = append(b.subjects, &templateSubject{airlockSubject: a, ref: largeName, size: largeImp.SizeBytes})
	}
	b.progressf("templates: small %s (%s), large %s (%s)", small, formatBytes(smallImp.SizeBytes), large, formatBytes(largeImp.SizeBytes))

	seed := b.seed()
	samples, err := b.rounds(ctx, seed)
	if err != nil {
		return Report{}, err
	}
	rep := Report{
		Benchmark: fmt.Sprintf("airlock bench template-size: create → first stdout byte of `echo hello`, from the minimal (busybox) template (%s) and a large one (%s), same rounds",
			formatBytes(smallImp.SizeBytes), formatBytes(largeImp.SizeBytes)),
		StartedAt: started,
		Runs:      b.cfg.Runs,
		Warmup:    b.cfg.Warmup,
		Seed:      seed,
		Order:     fmt.Sprintf("each round runs every subject once, in a new random order (seed %d)", seed),
		Template:  fmt.Sprintf("%s (small), %s (large)", small, large),
		Host:      hostFacts(ctx, b.cg, b.binaries, b.cfg.Version),
	}
	for i, s := range b.subjects {
		rep.Subjects = append(rep.Subjects, summarizeSubject(s.info(), samples[i], airlockPhases))
	}
	for i, s := range rep.Subjects {
		if _, ok := b.subjects[i].(*templateSubject); !ok {
			continue
		}
		for _, base := range rep.Subjects {
			if base.Kind == KindAirlock && base.Runtime == s.Runtime && !strings.HasSuffix(base.Name, "-large") {
				rep.Ratios = append(rep.Ratios, Ratio{
					Airlock: s.Name, Peer: base.Name,
					P50: RatioOf(s.FirstOutput.P50, base.FirstOutput.P50),
					P95: RatioOf(s.FirstOutput.P95, base.FirstOutput.P95),
				})
			}
		}
	}
	return rep, nil
}

// ensureLarge returns the large template built on template small, from the
// cache's record if the store still has it, else by generating its tree and
// importing it.
func (b *benchmark) ensureLarge(ctx context.Context, store *template.Store, cache string,
	small model.TemplateDigest, size int64) (model.TemplateDigest, error) {
	record := filepath.Join(cache, fmt.Sprintf("%s-%d-%s", largeRecipe, size, small.Hex()))
	if data, err := os.ReadFile(record); err == nil {
		if d, err := model.ParseTemplateDigest(strings.TrimSpace(string(data))); err == nil && store.Has(d) {
			b.progressf("large template %s from the cache", d)
			return d, nil
		}
	}
	b.progressf("generating and importing the large template (%s of data; once per cache)…", formatBytes(size))
	t0 := time.Now()
	src, err := os.MkdirTemp(cache, "src-")
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(src)
	tree := filepath.Join(src, "rootfs")
	if _, err := treecopy.Tree(ctx, store.RootfsDir(small), tree, treecopy.Options{}); err != nil {
		return "", fmt.Errorf("bench: copy the default template: %w", err)
	}
	if err := generateLarge(ctx, filepath.Join(tree, "opt", "bench-data"), size); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	imp, err := store.ImportDir(ctx, tree, nil)
	if err != nil {
		return "", fmt.Errorf("bench: import the large template: %w", err)
	}
	if err := atomicfile.Write(record, []byte(imp.Digest.String()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	b.progressf("large template %s ready in %s", imp.Digest, time.Since(t0).Round(time.Millisecond))
	return imp.Digest, nil
}

// generateLarge writes size bytes of deterministic, incompressible data as
// files of largeFileBytes under dir (created, with its parent).
func generateLarge(ctx context.Context, dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := 0; size > 0; i++ {
		n := min(size, largeFileBytes)
		var seed [32]byte
		copy(seed[:], fmt.Sprintf("%s-%d", largeRecipe, i))
		rng := rand.NewChaCha8(seed)
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("data-%04d", i)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		for left := n; left > 0; {
			if err := ctx.Err(); err != nil {
				f.Close()
				return err
			}
			chunk := buf[:min(left, int64(len(buf)))]
			_, _ = rng.Read(chunk)
			if _, err := f.Write(chunk); err != nil {
				f.Close()
				return err
			}
			left -= int64(len(chunk))
		}
		if err := f.Close(); err != nil {
			return err
		}
		size -= n
	}
	return nil
}

// templateSubject is an Airlock server measured on another template than
// its default. It shares the server with the default's subject, which owns
// (and closes) it.
type templateSubject struct {
	*airlockSubject
	ref  string
	size int64
}

func (t *templateSubject) info() Subject {
	s := t.airlockSubject.info()
	s.Name += "-large"
	s.Method = strings.Replace(s.Method, "(default template: the busybox tree, as --default-template minimal)", "(template "+t.ref+", "+formatBytes(t.size)+")", 1)
	return s
}

func (t *templateSubject) once(ctx context.Context) (sample, error) {
	return t.airlockSubject.onceFrom(ctx, t.ref)
}

func (t *templateSubject) close(context.Context) error { return nil }
