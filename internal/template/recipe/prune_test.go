package recipe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPruneCache: PruneCache keeps the entries a recipe's keys name and
// those used within the grace, and removes the rest (entry and tar), crashed
// writes and tars without an entry; the kept recipe then builds from the
// cache alone.
func TestPruneCache(t *testing.T) {
	ctx := context.Background()
	b := newBuilder(t, "")
	base := busybox(t, b)
	ctxDir := t.TempDir()
	writeFiles(t, ctxDir, map[string]string{"a.txt": "alpha\n", "dir/c.txt": "gamma\n", "dir/sub/e.txt": "e"})
	r := mustParse(t, chainRecipe(base))
	old, _ := build(t, b, r, ctxDir)
	// The recipe of now: its second copy step and those after differ.
	writeFiles(t, ctxDir, map[string]string{"dir/c.txt": "GAMMA\n"})
	cur, _ := build(t, b, r, ctxDir)
	keys, from, err := b.Keys(ctx, r, ctxDir)
	if err != nil || from != base {
		t.Fatalf("Keys: base %s (want %s), %v", from, base, err)
	}
	if len(keys) != len(cur.Steps) {
		t.Fatalf("%d keys, %d steps", len(keys), len(cur.Steps))
	}
	for i, st := range cur.Steps {
		if keys[i] != st.Key {
			t.Fatalf("key %d = %s, the build's %s", i, keys[i], st.Key)
		}
	}
	keep := map[string]bool{}
	for _, k := range keys {
		keep[k] = true
	}
	stale := []string{}
	for _, st := range old.Steps[3:] {
		stale = append(stale, st.Key)
	}
	writeFiles(t, b.CacheDir, map[string]string{"x.tar.tmp-1": "x", "orphan.tar": "x"})

	// Within the grace nothing goes: a build running now may need it.
	p, err := b.PruneCache(ctx, map[string]bool{}, time.Hour)
	if err != nil || p.Entries != 0 || p.Files != 0 {
		t.Fatalf("prune within the grace: %+v, %v", p, err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	ents, _ := os.ReadDir(b.CacheDir)
	for _, e := range ents {
		if err := os.Chtimes(filepath.Join(b.CacheDir, e.Name()), hourAgo, hourAgo); err != nil {
			t.Fatal(err)
		}
	}
	p, err = b.PruneCache(ctx, keep, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p.Entries != len(stale) || p.Files != 2 || p.Bytes == 0 {
		t.Errorf("pruned %+v, want %d entries and 2 stray files", p, len(stale))
	}
	for _, k := range stale {
		for _, f := range []string{b.entryPath(k), b.tarPath(k)} {
			if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s of a stale step is left: %v", filepath.Base(f), err)
			}
		}
	}
	for _, st := range cur.Steps[1:] {
		if p.Kept[st.Key] != st.Digest {
			t.Errorf("step %s: kept %q, want %s", short(st.Key), p.Kept[st.Key], st.Digest)
		}
		if _, err := os.Stat(b.tarPath(st.Key)); err != nil {
			t.Errorf("the tar of a kept step: %v", err)
		}
	}
	for _, n := range []string{"x.tar.tmp-1", "orphan.tar"} {
		if _, err := os.Stat(filepath.Join(b.CacheDir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left: %v", n, err)
		}
	}
	// The recipe of now still builds from the cache alone, in a fresh store.
	b2 := newBuilder(t, b.CacheDir)
	busybox(t, b2)
	again, log := build(t, b2, r, ctxDir)
	if got := cachedSteps(again); slices.Contains(got, false) || again.Imported.Digest != cur.Imported.Digest {
		t.Fatalf("after the prune: cached %v, digest %s, want %s\n%s", got, again.Imported.Digest, cur.Imported.Digest, log)
	}
	if strings.Contains(log, "building") {
		t.Errorf("log:\n%s", log)
	}
}
