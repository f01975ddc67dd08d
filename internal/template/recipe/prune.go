package recipe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// Keys returns the cache keys of r's steps, the base first (copy sources
// read from contextDir): the build cache entries a build of r uses; and
// the template r starts from ("" for a Debian base), which a build needs
// in the store.
func (b *Builder) Keys(ctx context.Context, r Recipe, contextDir string) ([]string, model.TemplateDigest, error) {
	steps, err := b.plan(ctx, r, contextDir)
	if err != nil {
		return nil, "", err
	}
	keys := make([]string, len(steps))
	for i, ps := range steps {
		keys[i] = ps.key
	}
	return keys, steps[0].base, nil
}

// Pruned is what PruneCache removed and kept.
type Pruned struct {
	Entries int   // cache entries removed (JSON and tar)
	Files   int   // stray files removed (temporary files, tars without an entry)
	Bytes   int64 // bytes of the files removed
	// Kept maps the key of every entry left to the template it records.
	Kept map[string]model.TemplateDigest
	// Recent are the keys of the entries left that were used within the
	// grace.
	Recent map[string]bool
}

// PruneCache removes every entry of the build cache whose key is not in
// keep and that was not used (written or hit) within grace, and the
// temporary files and tars without an entry older than grace: for a cache
// that many builds share and that should hold little more than the
// recipes of now (the tests' cache; tidy, at every build, removes only
// what went unused for maxUnused). The grace spares the entries of builds
// running meanwhile. It stops early, reporting what it removed, when ctx
// ends.
func (b *Builder) PruneCache(ctx context.Context, keep map[string]bool, grace time.Duration) (Pruned, error) {
	p := Pruned{Kept: map[string]model.TemplateDigest{}, Recent: map[string]bool{}}
	ents, err := os.ReadDir(b.CacheDir)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("build cache: %w", err)
	}
	now := time.Now()
	old := func(fi fs.FileInfo) bool { return now.Sub(fi.ModTime()) > grace }
	remove := func(name string, fi fs.FileInfo) bool {
		if err := os.Remove(filepath.Join(b.CacheDir, name)); err != nil {
			return false
		}
		p.Bytes += fi.Size()
		return true
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		name := e.Name()
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		key, isEntry := strings.CutSuffix(name, ".json")
		switch {
		case isEntry && (keep[key] || !old(fi)):
			if ce, ok, err := b.readEntry(key); err == nil && ok {
				p.Kept[key] = ce.Digest
			}
			if !old(fi) {
				p.Recent[key] = true
			}
		case isEntry:
			tar := key + ".tar"
			if tfi, err := os.Stat(filepath.Join(b.CacheDir, tar)); err == nil {
				remove(tar, tfi)
			}
			if remove(name, fi) {
				p.Entries++
			}
		case strings.HasSuffix(name, ".tar") || strings.Contains(name, ".tmp-"):
			// A tar whose entry is not (yet, or any more) there, or a
			// write that crashed.
			tarKey, _ := strings.CutSuffix(name, ".tar")
			if _, err := os.Stat(b.entryPath(tarKey)); err == nil && !strings.Contains(name, ".tmp-") {
				continue // the entry's, judged with it
			}
			if old(fi) && remove(name, fi) {
				p.Files++
			}
		}
	}
	return p, nil
}
