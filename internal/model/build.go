package model

import (
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/textclip"
)

// BuildID identifies a template build: "bld_…".
type BuildID string

// NewBuildID returns a fresh random build ID.
func NewBuildID() BuildID { return BuildID(newID("bld")) }

// ParseBuildID parses s as a build ID.
func ParseBuildID(s string) (BuildID, error) {
	v, err := parseID("build ID", "bld", s)
	return BuildID(v), err
}

func (id BuildID) String() string { return string(id) }

// BuildKind says what a template build starts from.
type BuildKind string

// Build kinds: an import of a directory, tar archive or OCI image; or a
// recipe (internal/template/recipe).
const (
	BuildImport BuildKind = "import"
	BuildRecipe BuildKind = "recipe"
)

// ParseBuildKind parses s as a build kind.
func ParseBuildKind(s string) (BuildKind, error) {
	switch k := BuildKind(s); k {
	case BuildImport, BuildRecipe:
		return k, nil
	}
	return "", fmt.Errorf("%w: build kind %q must be import or recipe", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// BuildState is a template build's progress. Succeeded and failed are final.
type BuildState string

// Build states.
const (
	BuildPending   BuildState = "pending"
	BuildRunning   BuildState = "running"
	BuildSucceeded BuildState = "succeeded"
	BuildFailed    BuildState = "failed"
)

// ParseBuildState parses s as a build state.
func ParseBuildState(s string) (BuildState, error) {
	switch st := BuildState(s); st {
	case BuildPending, BuildRunning, BuildSucceeded, BuildFailed:
		return st, nil
	}
	return "", fmt.Errorf("%w: build state %q must be pending, running, succeeded or failed", ErrInvalid, textclip.Bytes(s, maxEcho))
}

// Done reports whether the build has finished.
func (s BuildState) Done() bool { return s == BuildSucceeded || s == BuildFailed }

// BuildError says why a build failed.
type BuildError struct {
	Code    string // stable machine code, e.g. "invalid_request", "build_failed"
	Message string
}

// TemplateBuild is the stored record of one template build or import, run in
// the background by the server's build runner.
type TemplateBuild struct {
	ID      BuildID
	Kind    BuildKind
	Source  string     // as given: a path or image reference (import); "default" or "recipe" (recipe)
	Recipe  string     // the recipe's text (kind recipe); "" for the server's default recipe
	Context string     // absolute directory on the server host that recipe copy sources are relative to; may be ""
	Name    TaggedName // set to the digest when the build succeeds; may be zero
	// Project is the project of the API key that queued the build; "" for
	// the server's own builds (the default template). A member sees only
	// its own project's builds.
	Project ProjectID
	State   BuildState
	Error   *BuildError    // set when State is failed
	Digest  TemplateDigest // set when State is succeeded
	// Steps done (and of them, from the cache) out of StepsTotal; 0 when
	// unknown (imports).
	StepsDone, StepsCached, StepsTotal int
	Attempts                           int
	CreatedAt                          time.Time
	UpdatedAt                          time.Time
	FinishedAt                         *time.Time
}
