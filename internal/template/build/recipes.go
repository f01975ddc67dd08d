package build

import (
	"context"
	"io"

	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// Recipes adapts a *recipe.Builder to RecipeBuilder.
type Recipes struct {
	Builder *recipe.Builder
}

// BuildRecipe implements RecipeBuilder: text "" is recipe.Default().
// Progress comes from the builder's own step reports, never from the log
// (which run steps write to).
func (r Recipes) BuildRecipe(ctx context.Context, text, contextDir string, log io.Writer, progress func(StepProgress), sb recipe.Sandbox) (template.Imported, []Step, error) {
	rc := recipe.Default()
	if text != "" {
		var err error
		if rc, err = recipe.Parse([]byte(text)); err != nil {
			return template.Imported{}, nil, err
		}
	}
	opts := recipe.BuildOptions{Log: log, Sandbox: sb}
	if progress != nil {
		opts.Progress = func(p recipe.StepProgress) {
			progress(StepProgress{Done: p.Done, Cached: p.Cached, Total: p.Total})
		}
	}
	res, err := r.Builder.BuildWith(ctx, rc, contextDir, opts)
	if err != nil {
		return template.Imported{}, nil, err
	}
	steps := make([]Step, 0, len(res.Steps))
	for _, s := range res.Steps {
		steps = append(steps, Step{Key: s.Key, Kind: s.Kind, Cached: s.Cached})
	}
	return res.Imported, steps, nil
}
