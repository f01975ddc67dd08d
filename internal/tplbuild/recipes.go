package tplbuild

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"sync"

	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/recipe"
)

// Recipes adapts a *recipe.Builder to RecipeBuilder.
type Recipes struct {
	Builder *recipe.Builder
}

// BuildRecipe implements RecipeBuilder: text "" is recipe.Default().
func (r Recipes) BuildRecipe(ctx context.Context, text, contextDir string, log io.Writer, progress func(StepProgress)) (template.Imported, []Step, error) {
	rc := recipe.Default()
	if text != "" {
		var err error
		if rc, err = recipe.Parse([]byte(text)); err != nil {
			return template.Imported{}, nil, err
		}
	}
	w := &stepWatcher{w: log, progress: progress}
	res, err := r.Builder.Build(ctx, rc, contextDir, w)
	if err != nil {
		return template.Imported{}, nil, err
	}
	steps := make([]Step, 0, len(res.Steps))
	for _, s := range res.Steps {
		steps = append(steps, Step{Key: s.Key, Kind: s.Kind, Cached: s.Cached})
	}
	return res.Imported, steps, nil
}

// stepLine matches the recipe builder's step lines, "step N/M KIND KEY: …".
var stepLine = regexp.MustCompile(`^step (\d+)/(\d+) \S+ \S+: (CACHED|built in|building)`)

// stepWatcher passes a build's log through and reports progress from its
// step lines.
type stepWatcher struct {
	w        io.Writer
	progress func(StepProgress)

	mu     sync.Mutex
	line   []byte
	cached int
}

func (s *stepWatcher) Write(p []byte) (int, error) {
	s.mu.Lock()
	for _, c := range p {
		if c != '\n' {
			if len(s.line) < 256 {
				s.line = append(s.line, c)
			}
			continue
		}
		s.step(s.line)
		s.line = s.line[:0]
	}
	s.mu.Unlock()
	return s.w.Write(p)
}

func (s *stepWatcher) step(line []byte) {
	m := stepLine.FindSubmatch(bytes.TrimSpace(line))
	if m == nil || s.progress == nil {
		return
	}
	n, _ := strconv.Atoi(string(m[1]))
	total, _ := strconv.Atoi(string(m[2]))
	switch string(m[3]) {
	case "building":
		s.progress(StepProgress{Done: n - 1, Cached: s.cached, Total: total})
	case "CACHED":
		s.cached++
		s.progress(StepProgress{Done: n, Cached: s.cached, Total: total})
	default:
		s.progress(StepProgress{Done: n, Cached: s.cached, Total: total})
	}
}
