package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/build"
	"github.com/airlockdev/airlock/internal/template/recipe"
	"github.com/airlockdev/airlock/internal/textclip"
)

// BuildRunner is what the API asks of the server's build runner
// (*build.Runner): where build logs are and how far a running build is.
type BuildRunner interface {
	LogDir() string
	Progress(id model.BuildID) (build.Progress, bool)
	// SetRegistryAuth keeps the credentials build id pulls with, in memory
	// ("" forgets them).
	SetRegistryAuth(id model.BuildID, username, password string)
}

// importTemplateBody is POST /v1/templates's body. Its idempotency identity
// holds the registry password only as an HMAC keyed by the Idempotency-Key,
// as a secret's value.
type importTemplateBody apiv1.ImportTemplateRequest

func (b *importTemplateBody) idempotencyCanonical(key string) ([]byte, error) {
	c := *b
	if c.RegistryAuth != nil {
		mac := hmac.New(sha256.New, []byte("airlock-registry-auth-idempotency\x00"+key))
		mac.Write([]byte(c.RegistryAuth.Password))
		c.RegistryAuth = &apiv1.RegistryAuth{Username: c.RegistryAuth.Username, Password: fmt.Sprintf("hmac-sha256:%x", mac.Sum(nil))}
	}
	return json.Marshal(c)
}

// maxRegistryAuth bounds a registry user name and password (a registry
// token included).
const maxRegistryAuth = 8 << 10

func buildOut(b model.TemplateBuild) apiv1.Build {
	out := apiv1.Build{
		ID: b.ID.String(), Kind: string(b.Kind), Source: b.Source, State: string(b.State),
		Digest: b.Digest.String(), StepsDone: b.StepsDone, StepsCached: b.StepsCached, StepsTotal: b.StepsTotal,
		Attempts: b.Attempts, CreatedAt: b.CreatedAt.UTC(), UpdatedAt: b.UpdatedAt.UTC(),
	}
	if !b.Name.IsZero() {
		out.Name = b.Name.String()
	}
	if b.Error != nil {
		out.Error = &apiv1.Error{Code: b.Error.Code, Message: b.Error.Message}
	}
	if b.FinishedAt != nil {
		t := b.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	return out
}

// importTemplate: POST /v1/templates (admin) → 202 Build. It queues an
// import (source) or a recipe build (recipe) that the build runner runs in
// the background; the build points the optional name at the template when
// it succeeds. A path source that does not exist is refused at once.
func (a *API) importTemplate(ctx context.Context, c *call[importTemplateBody]) (*reply, error) {
	in := c.in
	b := model.TemplateBuild{ID: model.NewBuildID(), Project: c.p.project, CreatedAt: c.now}
	switch {
	case in.Source != "" && in.Recipe != "":
		return nil, badRequest("give source (an import) or recipe (a build), not both")
	case in.Recipe != "" && in.RegistryAuth != nil:
		return nil, badRequest("registry_auth goes with a registry source")
	case in.Recipe != "":
		// Parsed here too, so that a malformed recipe is a 400 at once.
		if _, err := recipe.Parse([]byte(in.Recipe)); err != nil {
			return nil, badRequest("%s", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "))
		}
		b.Kind, b.Source, b.Recipe = model.BuildRecipe, "recipe", in.Recipe
		if in.Context != "" {
			if !filepath.IsAbs(in.Context) || filepath.Clean(in.Context) != in.Context {
				return nil, badRequest("context %q must be a clean absolute directory on the server host", in.Context)
			}
			if fi, err := os.Stat(in.Context); err != nil || !fi.IsDir() {
				return nil, badRequest("context %s is not a directory on the server host", in.Context)
			}
			b.Context = in.Context
		}
	default:
		if in.Context != "" {
			return nil, badRequest("context goes with recipe, not with source")
		}
		src, err := parseTemplateSource(in.Source)
		if err != nil {
			return nil, err
		}
		if src.digest != "" && a.cfg.Distribution == nil {
			return nil, errorf(apiv1.CodeNotSupported,
				"source %s: this server has no blob store to pull templates from (start it with --blob-store)", src.digest)
		}
		if p := src.localPath(); p != "" {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				return nil, badRequest("source %s does not exist on the server host", src)
			}
		}
		b.Kind, b.Source = model.BuildImport, src.String()
		if in.RegistryAuth != nil {
			if src.image.Source() != template.ImageRegistry {
				return nil, badRequest("registry_auth goes with a registry source")
			}
			ra := in.RegistryAuth
			if ra.Username == "" || ra.Password == "" || len(ra.Username)+len(ra.Password) > maxRegistryAuth ||
				strings.ContainsAny(ra.Username, ":\r\n") {
				return nil, badRequest("registry_auth needs a username (without ':') and a password, at most %d bytes together", maxRegistryAuth)
			}
			if a.cfg.Builds == nil {
				return nil, errorf(apiv1.CodeNotSupported, "this server runs no builds to pull with registry_auth")
			}
		}
	}
	if c.present["name"] {
		var err error
		if b.Name, err = model.ParseTaggedName(in.Name); err != nil {
			return nil, err
		}
	}
	b.State, b.UpdatedAt = model.BuildPending, c.now
	rep, rec, err := c.reply(http.StatusAccepted, buildOut(b))
	if err != nil {
		return nil, err
	}
	if in.RegistryAuth != nil {
		// Before the build is queued: the runner must find them when it
		// claims it.
		a.cfg.Builds.SetRegistryAuth(b.ID, in.RegistryAuth.Username, in.RegistryAuth.Password)
	}
	if err := a.cfg.Store.CreateBuild(ctx, b, rec); err != nil {
		if in.RegistryAuth != nil {
			a.cfg.Builds.SetRegistryAuth(b.ID, "", "")
		}
		return nil, fmt.Errorf("queue build: %w", err)
	}
	a.log.InfoContext(ctx, "template build queued", "build", b.ID, "kind", b.Kind, "source", b.Source, "name", b.Name)
	c.created(b.ID.String())
	return rep, nil
}

// encodeBuildCursor makes the next_cursor of a build listing.
func encodeBuildCursor(c store.BuildCursor) string {
	return encodeTimeCursor(c.CreatedAt, c.ID.String())
}

// decodeBuildCursor parses a build listing's cursor.
func decodeBuildCursor(s string) (store.BuildCursor, error) {
	at, id, err := decodeTimeCursor(s, model.ParseBuildID)
	return store.BuildCursor{CreatedAt: at, ID: id}, err
}

// parseBuildQuery parses the query of GET /v1/builds: name, state (pending,
// running, succeeded, failed, or active for pending and running), limit,
// cursor.
func parseBuildQuery(q url.Values) (store.BuildQuery, error) {
	bq := store.BuildQuery{Limit: defaultListLimit}
	for name, vals := range q {
		if len(vals) != 1 {
			return store.BuildQuery{}, badRequest("give %s once", textclip.Bytes(name, maxEcho))
		}
		v := vals[0]
		switch name {
		case "name":
			n, err := model.ParseTaggedName(v)
			if err != nil {
				return store.BuildQuery{}, err
			}
			bq.Name = n
		case "state":
			if v == "active" {
				bq.States = []model.BuildState{model.BuildPending, model.BuildRunning}
				continue
			}
			st, err := model.ParseBuildState(v)
			if err != nil {
				return store.BuildQuery{}, err
			}
			bq.States = []model.BuildState{st}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxListLimit {
				return store.BuildQuery{}, badRequest("limit must be an integer from 1 to %d", maxListLimit)
			}
			bq.Limit = n
		case "cursor":
			c, err := decodeBuildCursor(v)
			if err != nil {
				return store.BuildQuery{}, err
			}
			bq.Before = &c
		default:
			return store.BuildQuery{}, badRequest("unknown query parameter %q", textclip.Bytes(name, maxEcho))
		}
	}
	return bq, nil
}

// buildScope is whose builds p sees: an admin every build (the server's
// own, such as the default template's, included); anyone else only the
// builds its own project's keys queued. A build's source, recipe context
// and log name server paths, registry hosts and their errors.
func buildScope(p principal) store.Scope {
	if p.role == model.RoleAdmin {
		return store.AllProjects()
	}
	return store.OnlyProject(p.project)
}

// listBuilds: GET /v1/builds → 200 BuildList, newest first: every build
// for an admin, the caller's project's for anyone else.
func (a *API) listBuilds(w http.ResponseWriter, r *http.Request, p principal) {
	q, err := parseBuildQuery(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	q.Scope = buildScope(p)
	page, err := a.cfg.Store.ListBuilds(r.Context(), q)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list builds: %w", err))
		return
	}
	out := apiv1.BuildList{Builds: make([]apiv1.Build, 0, len(page.Builds))}
	for _, b := range page.Builds {
		out.Builds = append(out.Builds, buildOut(b))
	}
	if page.Next != nil {
		out.NextCursor = encodeBuildCursor(*page.Next)
	}
	writeJSON(w, http.StatusOK, out)
}

// buildOf reads the build of the {id} path value, if p may see it
// (buildScope): another project's build, or the server's own for a
// non-admin, is not_found as an unknown one is.
func (a *API) buildOf(ctx context.Context, r *http.Request, p principal) (model.TemplateBuild, error) {
	id, err := model.ParseBuildID(r.PathValue("id"))
	if err != nil {
		return model.TemplateBuild{}, err
	}
	b, err := a.cfg.Store.GetBuild(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return model.TemplateBuild{}, notFound("build %s not found", id)
	}
	if err != nil {
		return model.TemplateBuild{}, fmt.Errorf("get build %s: %w", id, err)
	}
	project, limited, err := buildScope(p).Project()
	if err != nil {
		return model.TemplateBuild{}, err
	}
	if limited && b.Project != project {
		return model.TemplateBuild{}, notFound("build %s not found", id)
	}
	return b, nil
}

// getBuild: GET /v1/builds/{id} → 200 Build (buildOf: the caller's to see).
func (a *API) getBuild(w http.ResponseWriter, r *http.Request, p principal) {
	b, err := a.buildOf(r.Context(), r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, buildOut(b))
}
