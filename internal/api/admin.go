package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/textclip"
)

// parseProjectName checks a project name: 1–63 characters of [A-Za-z0-9._-],
// starting with a letter or digit.
func parseProjectName(s string) (string, error) {
	if len(s) == 0 || len(s) > 63 {
		return "", badRequest("project name must be 1 to 63 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return "", badRequest("project name %q must be letters, digits, '.', '_' and '-', starting with a letter or digit", textclip.Bytes(s, maxEcho))
		}
	}
	return s, nil
}

// parseKeyName checks an API key's label: at most 128 bytes of UTF-8
// without control characters.
func parseKeyName(s string) (string, error) {
	if len(s) > 128 || !utf8.ValidString(s) {
		return "", badRequest("key name must be at most 128 bytes of UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "", badRequest("key name must not contain control characters")
		}
	}
	return s, nil
}

// createProject: POST /v1/admin/projects → 201 Project. Project names are
// unique, so a repeat after a lost idempotency record cannot duplicate.
func (a *API) createProject(ctx context.Context, c *call[apiv1.CreateProjectRequest]) (*reply, error) {
	name, err := parseProjectName(c.in.Name)
	if err != nil {
		return nil, err
	}
	p := model.Project{ID: model.NewProjectID(), Name: name, CreatedAt: c.now}
	rep, rec, err := c.reply(http.StatusCreated, projectOut(p))
	if err != nil {
		return nil, err
	}
	if err := a.cfg.Store.CreateProject(ctx, p); err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			if c.idem != nil {
				// A concurrent twin with the same key may have won the name.
				if prev, found, lerr := a.lookupIdempotency(ctx, c.idem); lerr == nil && found {
					return nil, &store.IdempotencyConflictError{Existing: prev}
				}
			}
			return nil, errorf(apiv1.CodeAlreadyExists, "a project named %q exists", name)
		}
		return nil, fmt.Errorf("create project: %w", err)
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	c.created(p.ID.String())
	return rep, nil
}

// listProjects: GET /v1/admin/projects → 200 ProjectList.
func (a *API) listProjects(w http.ResponseWriter, r *http.Request, _ principal) {
	ps, err := a.cfg.Store.ListProjects(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list projects: %w", err))
		return
	}
	out := apiv1.ProjectList{Projects: make([]apiv1.Project, 0, len(ps))}
	for _, p := range ps {
		out.Projects = append(out.Projects, projectOut(p))
	}
	writeJSON(w, http.StatusOK, out)
}

// createKey: POST /v1/admin/keys → 201 APIKey, the only response that
// carries the key's token.
func (a *API) createKey(ctx context.Context, c *call[apiv1.CreateAPIKeyRequest]) (*reply, error) {
	project, err := model.ParseProjectID(c.in.ProjectID)
	if err != nil {
		return nil, err
	}
	role, err := model.ParseRole(c.in.Role)
	if err != nil {
		return nil, err
	}
	name, err := parseKeyName(c.in.Name)
	if err != nil {
		return nil, err
	}
	format, err := auth.ParseAPIKeyFormat(c.in.Format)
	if err != nil {
		return nil, err
	}
	if project == model.SystemProject {
		// It owns unclaimed pool sandboxes; no key may act for it.
		return nil, notFound("project %s not found", project)
	}
	if _, err := a.cfg.Store.GetProject(ctx, project); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("project %s not found", project)
		}
		return nil, fmt.Errorf("get project %s: %w", project, err)
	}
	token, id, hash, err := auth.GenerateAPIKeyFormat(format)
	if err != nil {
		return nil, err
	}
	k := model.APIKey{ID: id, ProjectID: project, Role: role, Name: name, SecretHash: hash, CreatedAt: c.now}
	out := apiKeyOut(k)
	out.Token = token
	rep, rec, err := c.reply(http.StatusCreated, out)
	if err != nil {
		return nil, err
	}
	if err := a.cfg.Store.CreateAPIKey(ctx, k, rec); err != nil {
		return nil, fmt.Errorf("create API key: %w", err)
	}
	a.log.InfoContext(ctx, "API key created", "key", id, "project", project, "role", role, "format", format, "by", c.p.keyID)
	c.created(id.String())
	return rep, nil
}

// listKeys: GET /v1/admin/keys[?project_id=] → 200 APIKeyList (no tokens).
// Without project_id it lists the caller's project.
func (a *API) listKeys(w http.ResponseWriter, r *http.Request, p principal) {
	project := p.project
	for name, vals := range r.URL.Query() {
		if name != "project_id" || len(vals) != 1 {
			a.writeError(w, r, badRequest("the only query parameter is project_id, given once"))
			return
		}
		var err error
		if project, err = model.ParseProjectID(vals[0]); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	keys, err := a.cfg.Store.ListAPIKeys(r.Context(), project)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list API keys of %s: %w", project, err))
		return
	}
	out := apiv1.APIKeyList{Keys: make([]apiv1.APIKey, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, apiKeyOut(k))
	}
	writeJSON(w, http.StatusOK, out)
}

// revokeKey: DELETE /v1/admin/keys/{id} → 200 APIKey with revoked_at. The
// key is refused from the next request on. Revoking is idempotent by nature
// (revoked_at keeps its first value).
func (a *API) revokeKey(ctx context.Context, c *call[noBody]) (*reply, error) {
	id, err := model.ParseAPIKeyID(c.r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if err := a.cfg.Store.RevokeAPIKey(ctx, id, c.now); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("API key %s not found", id)
		}
		return nil, fmt.Errorf("revoke API key %s: %w", id, err)
	}
	k, err := a.cfg.Store.GetAPIKey(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read API key %s back: %w", id, err)
	}
	a.log.InfoContext(ctx, "API key revoked", "key", id, "by", c.p.keyID)
	rep, rec, err := c.reply(http.StatusOK, apiKeyOut(k))
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}
