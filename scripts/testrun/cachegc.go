package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/filelock"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// The tests' recipe build cache and the template store beside it
// ($AIRLOCK_TEST_CACHE/recipe-cache-v1, recipe-store-v1; see
// integration's fillRecipeCache) grow with every recipe any run built:
// tens of GB within days. At the start of a full run (or a soak) they are
// pruned to what the recipes of this checkout name, plus what any build
// used within cacheGrace (another checkout's run under way).
const cacheGrace = time.Hour

// cacheGCTimeout bounds the prune: a run never waits long for it.
const cacheGCTimeout = 5 * time.Minute

// recipeSource is a recipe the tests build into the shared cache, with the
// directory its copy steps read.
type recipeSource struct {
	name       string
	r          recipe.Recipe
	contextDir string
}

// currentRecipes are the recipes the tests build into the shared cache:
// the Debian default and every templates/*/recipe.yaml.
func currentRecipes(root string) ([]recipeSource, error) {
	out := []recipeSource{{name: "default", r: recipe.Default(), contextDir: root}}
	paths, err := filepath.Glob(filepath.Join(root, "templates", "*", "recipe.yaml"))
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r, err := recipe.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, recipeSource{name: filepath.Base(filepath.Dir(p)), r: r, contextDir: filepath.Dir(p)})
	}
	return out, nil
}

// cacheGCResult is what pruneRecipeCache removed.
type cacheGCResult struct {
	cache     recipe.Pruned
	templates int // templates removed from the store
}

func (g cacheGCResult) String() string {
	return fmt.Sprintf("removed %d build cache entries and %d stray files (%.1f GB), %d templates of the store",
		g.cache.Entries, g.cache.Files, float64(g.cache.Bytes)/1e9, g.templates)
}

// pruneRecipeCache prunes the build cache cacheDir to the entries of the
// recipes' steps and those used within grace, and the store in storeDir
// (holding its lock, as the tests do) to the templates the recipes make
// and those the entries used within grace record: the steps before a
// recipe's last need no tree (a build resumes at the last cached step),
// their tars stay in the cache.
func pruneRecipeCache(ctx context.Context, cacheDir, storeDir string, recipes []recipeSource, grace time.Duration) (cacheGCResult, error) {
	var res cacheGCResult
	if _, err := os.Stat(cacheDir); errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	lock, err := filelock.Lock(ctx, storeDir+".lock")
	if err != nil {
		return res, fmt.Errorf("lock %s: %w", storeDir, err)
	}
	defer lock.Close()
	store, err := template.Open(storeDir, nil)
	if err != nil {
		return res, err
	}
	b := &recipe.Builder{Store: store, CacheDir: cacheDir}
	keep := map[string]bool{}
	want := map[model.TemplateDigest]bool{}
	var last []string // each recipe's last step
	for _, rs := range recipes {
		keys, base, err := b.Keys(ctx, rs.r, rs.contextDir)
		if err != nil {
			return res, fmt.Errorf("recipe %s: %w", rs.name, err)
		}
		for _, k := range keys {
			keep[k] = true
		}
		last = append(last, keys[len(keys)-1])
		if base != "" {
			want[base] = true
		}
	}
	if res.cache, err = b.PruneCache(ctx, keep, grace); err != nil {
		return res, err
	}
	for k := range res.cache.Recent { // a build of another checkout may need it
		want[res.cache.Kept[k]] = true
	}
	for _, k := range last {
		if d, ok := res.cache.Kept[k]; ok {
			want[d] = true
		}
	}
	ds, err := store.Digests()
	if err != nil {
		return res, err
	}
	yes := func(context.Context) (bool, error) { return true, nil }
	for _, d := range ds {
		if want[d] {
			continue
		}
		removed, err := store.Remove(ctx, d, yes)
		if errors.Is(err, template.ErrBusy) {
			continue // an import of this process's store holds it: next run
		}
		if err != nil {
			return res, fmt.Errorf("remove template %s: %w", d, err)
		}
		if removed {
			res.templates++
		}
	}
	return res, nil
}

// pruneTestCache runs pruneRecipeCache on the run's test cache, reporting
// what it did; a failure is reported, not fatal (the tests rebuild what
// they miss).
func (r *runner) pruneTestCache(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, cacheGCTimeout)
	defer cancel()
	start := time.Now()
	recipes, err := currentRecipes(r.root)
	if err == nil {
		var res cacheGCResult
		res, err = pruneRecipeCache(ctx, filepath.Join(r.cache, "recipe-cache-v1"), filepath.Join(r.cache, "recipe-store-v1"), recipes, cacheGrace)
		if err == nil {
			fmt.Printf("testrun: test cache: %s in %v\n", res, time.Since(start).Round(time.Second))
			return
		}
	}
	if errors.Is(err, recipe.ErrNoMmdebstrap) {
		fmt.Println("testrun: test cache: not pruned (no mmdebstrap: the recipes' keys need its version)")
		return
	}
	fmt.Printf("testrun: test cache: not pruned: %v\n", err)
}
