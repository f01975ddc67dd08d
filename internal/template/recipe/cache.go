package recipe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// The build cache: for every step built, CacheDir holds
//
//	<key>.json  {"digest", "manifest", "created"}: the template the step made
//	<key>.tar   that template's tree (template.Store.WriteArchive)
//
// both written atomically (temporary file, then rename), the tar first. A
// hit needs only the JSON when the store has the digest; otherwise the tar
// is imported with the recorded manifest's configuration and must give the
// recorded digest: a mismatch is a corrupt entry, deleted and rebuilt. So a
// cache directory shared by several stores (test servers) serves them all.

type cacheEntry struct {
	Digest   model.TemplateDigest `json:"digest"`
	Manifest string               `json:"manifest"` // the template's canonical manifest
	Kind     string               `json:"kind"`
	Created  time.Time            `json:"created"`
}

func (b *Builder) entryPath(key string) string { return filepath.Join(b.CacheDir, key+".json") }
func (b *Builder) tarPath(key string) string   { return filepath.Join(b.CacheDir, key+".tar") }

// readEntry returns the cache entry of key; ok is false when there is none.
func (b *Builder) readEntry(key string) (cacheEntry, bool, error) {
	data, err := os.ReadFile(b.entryPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return cacheEntry{}, false, nil
	}
	if err != nil {
		return cacheEntry{}, false, fmt.Errorf("build cache: %w", err)
	}
	var e cacheEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return cacheEntry{}, false, fmt.Errorf("build cache entry %s: %w", b.entryPath(key), err)
	}
	if _, err := model.ParseTemplateDigest(string(e.Digest)); err != nil {
		return cacheEntry{}, false, fmt.Errorf("build cache entry %s: %w", b.entryPath(key), err)
	}
	return e, true, nil
}

// lookup answers a step's result from the cache, importing its tar when
// the store lacks it. A corrupt entry is logged and deleted (ok false).
func (b *Builder) lookup(ctx context.Context, key string, logf func(string, ...any)) (template.Imported, bool, error) {
	e, ok, err := b.readEntry(key)
	if err != nil {
		logf("cache entry %s is unreadable, rebuilding: %v", short(key), err)
		b.dropEntry(key)
		return template.Imported{}, false, nil
	}
	if !ok {
		return template.Imported{}, false, nil
	}
	b.touch(key)
	if b.Store.Has(e.Digest) {
		imp, err := b.loaded(e.Digest)
		return imp, err == nil, err
	}
	f, err := os.Open(b.tarPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return template.Imported{}, false, nil
	}
	if err != nil {
		return template.Imported{}, false, fmt.Errorf("build cache: %w", err)
	}
	defer f.Close()
	// Published only if tree and manifest hash to the recorded digest.
	imp, err := b.Store.ImportArchive(ctx, f, e.Digest, []byte(e.Manifest), nil)
	if err != nil {
		if ctx.Err() != nil {
			return template.Imported{}, false, ctx.Err()
		}
		if !errors.Is(err, model.ErrInvalid) && !errors.Is(err, template.ErrCorrupt) {
			return template.Imported{}, false, fmt.Errorf("build cache: import %s: %w", b.tarPath(key), err)
		}
		b.logger().Warn("recipe build cache: corrupt entry", "key", key, "err", err)
		logf("cache entry %s is corrupt, rebuilding: %v", short(key), err)
		b.dropEntry(key)
		return template.Imported{}, false, nil
	}
	return imp, true, nil
}

func (b *Builder) dropEntry(key string) {
	for _, p := range []string{b.entryPath(key), b.tarPath(key)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.logger().Error("recipe build cache: cannot remove entry", "path", p, "err", err)
		}
	}
}

// store records a step's result: the tar, then the entry. A start step
// (a check whose result is its parent's template, whose entry has the
// tree) records the entry alone: without the template in the store it is
// a miss, and the check runs again.
func (b *Builder) store(ctx context.Context, key, kind string, imp template.Imported) error {
	if kind != KindStart {
		if err := b.storeTar(ctx, key, imp); err != nil {
			return err
		}
	}
	data, err := json.Marshal(cacheEntry{Digest: imp.Digest, Manifest: string(imp.Manifest), Kind: kind, Created: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(b.entryPath(key), data, 0o644); err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	return nil
}

func (b *Builder) storeTar(ctx context.Context, key string, imp template.Imported) error {
	tmp, err := os.CreateTemp(b.CacheDir, key+".tar.tmp-")
	if err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = b.Store.WriteArchive(ctx, imp.Digest, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), b.tarPath(key))
	}
	if err != nil {
		return fmt.Errorf("build cache: write %s: %w", b.tarPath(key), err)
	}
	return nil
}

// Cache entries unused (neither written nor hit) this long are removed.
const maxUnused = 30 * 24 * time.Hour

// tidy removes temporary files of cache writes that crashed and tars
// without an entry (both older than a day, so that a concurrent build's are
// left alone), and entries unused for maxUnused.
func (b *Builder) tidy() {
	ents, err := os.ReadDir(b.CacheDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		fi, err := e.Info()
		if err != nil {
			continue
		}
		age := time.Since(fi.ModTime())
		key, isEntry := strings.CutSuffix(name, ".json")
		tarKey, isTar := strings.CutSuffix(name, ".tar")
		switch {
		case strings.Contains(name, ".tmp-"):
			if age > 24*time.Hour {
				os.Remove(filepath.Join(b.CacheDir, name))
			}
		case isEntry && age > maxUnused:
			b.logger().Info("recipe build cache: removing an unused entry", "key", key)
			b.dropEntry(key)
		case isTar && age > 24*time.Hour:
			if _, err := os.Stat(b.entryPath(tarKey)); errors.Is(err, fs.ErrNotExist) {
				os.Remove(filepath.Join(b.CacheDir, name))
			}
		}
	}
}

// touch marks key's entry used now.
func (b *Builder) touch(key string) {
	now := time.Now()
	if err := os.Chtimes(b.entryPath(key), now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.logger().Warn("recipe build cache: cannot touch an entry", "key", key, "err", err)
	}
}

// loaded describes template d of the store.
func (b *Builder) loaded(d model.TemplateDigest) (template.Imported, error) {
	data, err := b.Store.Manifest(d)
	if err != nil {
		return template.Imported{}, err
	}
	m, err := template.ParseManifest(data)
	if err != nil {
		return template.Imported{}, fmt.Errorf("%w: %s: %w", template.ErrCorrupt, d, err)
	}
	return template.Imported{Digest: d, Manifest: data, SizeBytes: m.Rootfs.SizeBytes, Entries: m.Rootfs.Entries, Reused: true}, nil
}

func short(key string) string { return key[:12] }
