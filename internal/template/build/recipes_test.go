package build

import (
	"context"
	"fmt"
	"os"
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
	rb := Recipes{Builder: &recipe.Builder{Store: ts, CacheDir: filepath.Join(dir, "cache")}}
	sb := echoSandbox{dir: t.TempDir()}
	text := fmt.Sprintf(`
from: {template: %q}
steps:
  - run: "echo 'step 9/9 run abc: CACHED'; echo 'step 8/9 run abc: building'; echo 'step 9/9 run abc: built in 1.0s'"
  - run: "echo 'step 7/9 copy def: CACHED'"
`, base.Digest)
	var log strings.Builder
	var got []StepProgress
	_, steps, err := rb.BuildRecipe(context.Background(), text, t.TempDir(), &log, func(p StepProgress) { got = append(got, p) }, sb)
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
	if _, _, err := rb.BuildRecipe(context.Background(), text, t.TempDir(), &log, func(p StepProgress) { got = append(got, p) }, sb); err != nil {
		t.Fatal(err)
	}
	want = []StepProgress{{0, 0, 3}, {1, 1, 3}, {1, 1, 3}, {2, 2, 3}, {2, 2, 3}, {3, 3, 3}}
	if !slices.Equal(got, want) {
		t.Errorf("cached build: progress %v, want %v", got, want)
	}
}

// echoSandbox is a build sandbox that runs nothing: it writes a run step's
// last argument (its script) to the log and leaves an empty layer.
type echoSandbox struct{ dir string }

func (e echoSandbox) Run(ctx context.Context, req recipe.SandboxRun) (recipe.SandboxResult, error) {
	fmt.Fprintln(req.Log, req.Argv[len(req.Argv)-1])
	layer, err := os.MkdirTemp(e.dir, "layer-")
	if err != nil {
		return recipe.SandboxResult{}, err
	}
	return recipe.SandboxResult{Layer: layer, Release: func() { os.RemoveAll(layer) }}, nil
}
