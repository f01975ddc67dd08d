package build

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// A run step that prints lines like the builder's own step lines does not
// change the reported progress: it comes from the builder, not the log.
func TestRecipeProgressIgnoresLog(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "unshare")
	_, ts, dir := newEnv(t)
	base, err := ts.EnsureDefault(context.Background(), airtest.BusyboxPath(t))
	if err != nil {
		t.Fatal(err)
	}
	rb := Recipes{Builder: &recipe.Builder{Store: ts, CacheDir: filepath.Join(dir, "cache"), RunOnTemplateBases: true}}
	text := fmt.Sprintf(`
from: {template: %q}
steps:
  - run: "echo 'step 9/9 run abc: CACHED'; echo 'step 8/9 run abc: building'; echo 'step 9/9 run abc: built in 1.0s'"
  - run: "echo 'step 7/9 copy def: CACHED'"
`, base.Digest)
	var log strings.Builder
	var got []StepProgress
	_, steps, err := rb.BuildRecipe(context.Background(), text, t.TempDir(), &log, func(p StepProgress) { got = append(got, p) })
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "step 9/9 run abc: CACHED") {
		t.Errorf("the run step's output is not in the log:\n%s", log.String())
	}
	want := []StepProgress{{0, 0, 3}, {1, 1, 3}, {1, 1, 3}, {2, 1, 3}, {2, 1, 3}, {3, 1, 3}}
	if !slices.Equal(got, want) {
		t.Errorf("progress %v, want %v\n%s", got, want, log.String())
	}
	if len(steps) != 3 || !steps[0].Cached || steps[1].Cached || steps[2].Cached {
		t.Errorf("steps = %+v", steps)
	}

	// Again, all from the cache: each step reported once as it starts, once
	// as it ends.
	got = nil
	if _, _, err := rb.BuildRecipe(context.Background(), text, t.TempDir(), &log, func(p StepProgress) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	want = []StepProgress{{0, 0, 3}, {1, 1, 3}, {1, 1, 3}, {2, 2, 3}, {2, 2, 3}, {3, 3, 3}}
	if !slices.Equal(got, want) {
		t.Errorf("cached build: progress %v, want %v", got, want)
	}
}
