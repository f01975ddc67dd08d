package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// TestPruneRecipeCache: the shared cache keeps every step of the current
// recipes and the entries any build used within the grace; everything else
// goes, entry and tar. The store keeps the current recipes' final templates
// and bases and the grace's templates, not their intermediate trees nor
// another recipe's. The current recipe then builds from cache and store
// alone.
func TestPruneRecipeCache(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "unshare")
	ctx := context.Background()
	tmp := t.TempDir()
	cacheDir, storeDir := filepath.Join(tmp, "recipe-cache-v1"), filepath.Join(tmp, "recipe-store-v1")
	store, err := template.Open(storeDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := store.EnsureDefault(ctx, airtest.BusyboxPath(t))
	if err != nil {
		t.Fatal(err)
	}
	base := bb.Digest
	ctxDir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(ctxDir, n+".txt"), []byte(n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Two copy steps and a config step on the busybox base (no run step:
	// no build sandbox needed).
	mk := func(name, file string) recipeSource {
		r, err := recipe.Parse(fmt.Appendf(nil, "from: {template: %q}\nsteps:\n  - copy: {src: a.txt, dst: /a.txt}\n  - copy: {src: %s, dst: /x.txt}\nenv: {N: %s}\n", base, file, name))
		if err != nil {
			t.Fatal(err)
		}
		return recipeSource{name: name, r: r, contextDir: ctxDir}
	}
	current, other, recent := mk("current", "b.txt"), mk("other", "c.txt"), mk("recent", "a.txt")
	b := &recipe.Builder{Store: store, CacheDir: cacheDir}
	built := map[string]recipe.Result{}
	for _, rs := range []recipeSource{current, other, recent} {
		res, err := b.Build(ctx, rs.r, rs.contextDir, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		built[rs.name] = res
	}
	// All but the recent recipe's entries were last used two hours ago;
	// a crashed write and a tar without an entry are as old.
	for _, n := range []string{"x.tar.tmp-1", "orphan.tar"} {
		if err := os.WriteFile(filepath.Join(cacheDir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(cacheDir)
	old := time.Now().Add(-2 * time.Hour)
	recentKeys := map[string]bool{}
	for _, st := range built["recent"].Steps {
		recentKeys[st.Key] = true
	}
	for _, e := range ents {
		key := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".json"), ".tar")
		if !recentKeys[key] {
			if err := os.Chtimes(filepath.Join(cacheDir, e.Name()), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}

	res, err := pruneRecipeCache(ctx, cacheDir, storeDir, []recipeSource{current}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res)
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	entry := func(key string) bool { return exists(filepath.Join(cacheDir, key+".json")) }
	tar := func(key string) bool { return exists(filepath.Join(cacheDir, key+".tar")) }
	for _, st := range built["current"].Steps[1:] {
		if !entry(st.Key) || !tar(st.Key) {
			t.Errorf("current recipe, step %s: entry %v, tar %v", st.Kind, entry(st.Key), tar(st.Key))
		}
	}
	for _, st := range built["recent"].Steps[1:] {
		if !entry(st.Key) {
			t.Errorf("a step used within the grace was removed (%s)", st.Kind)
		}
	}
	// The other recipe shares its first copy step with the current one.
	for _, st := range built["other"].Steps[2:] {
		if entry(st.Key) || tar(st.Key) {
			t.Errorf("the other recipe's %s step is left", st.Kind)
		}
	}
	for _, n := range []string{"x.tar.tmp-1", "orphan.tar"} {
		if exists(filepath.Join(cacheDir, n)) {
			t.Errorf("%s is left", n)
		}
	}
	if res.cache.Entries != 2 || res.cache.Files != 2 {
		t.Errorf("removed %d entries and %d files, want 2 and 2", res.cache.Entries, res.cache.Files)
	}
	want := map[model.TemplateDigest]bool{base: true, built["current"].Imported.Digest: true}
	for _, st := range built["recent"].Steps[1:] {
		want[st.Digest] = true
	}
	have, err := store.Digests()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range have {
		if !want[d] {
			t.Errorf("the store still holds %s", d)
		}
		delete(want, d)
	}
	if len(want) != 0 {
		t.Errorf("the store lost %v", want)
	}

	// The current recipe builds from what is left, without building.
	again, err := b.BuildWith(ctx, current.r, current.contextDir, recipe.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range again.Steps {
		if !st.Cached {
			t.Errorf("step %s was built again", st.Kind)
		}
	}
	if again.Imported.Digest != built["current"].Imported.Digest {
		t.Errorf("digest %s, want %s", again.Imported.Digest, built["current"].Imported.Digest)
	}
}
