package control

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// E2B's template build API on Airlock builds (see tplrecipe.go for the
// steps, tplfiles.go for the uploaded files):
//
//   - POST /v3/templates {name, tags}: E2B's "request build" reserves a
//     build ID; templateID is the template's name (E2B's alias), which
//     Sandbox.create takes as its template.
//   - POST /v2/templates/{templateID}/builds/{buildID}: the steps become a
//     recipe (run steps in build sandboxes) queued natively
//     (POST /v1/templates, admin keys only, as native builds) with the
//     build's context directory and the name name:tag (latest without a
//     tag); the other tags are pointed at the result once it is ready.
//   - GET /templates/{templateID}/builds/{buildID}/status?logsOffset=N:
//     the native build's state (pending: waiting, running: building,
//     succeeded: ready, failed: error with its message) and its log's
//     lines from entry N on, at most 100 a call.
//   - GET /templates/aliases/{alias}: 200 when the template exists, 404.
//   - POST /templates/tags, DELETE /templates/tags, GET
//     /templates/{templateID}/tags: tags of a template name (native tags).
//
// The builds are kept in the store (Config.Builds): any server of a
// cluster answers their status, and a restart forgets none (tplbuilds.go).
// Building, tagging and deleting templates needs an admin key
// (templates are shared by every project: a template name is global and
// any project may create sandboxes from it), refused with E2B's 403 and
// the reason; the status of a build answers any key of its project.

// templateRoutes are the template routes, registered by New when
// Config.TemplateFiles is set.
func (h *Handler) templateRoutes() []struct {
	pattern string
	fn      func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error
} {
	return []struct {
		pattern string
		fn      func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error
	}{
		{"POST /v3/templates", h.requestBuild},
		{"GET /templates/{templateID}/files/{hash}", h.fileUploadLink},
		{"POST /v2/templates/{templateID}/builds/{buildID}", h.startBuild},
		{"GET /templates/{templateID}/builds/{buildID}/status", h.buildStatus},
		// GET /templates/aliases/{alias} and GET /templates/{templateID}/tags.
		{"GET /templates/{a}/{b}", h.templatePair},
		{"POST /templates/tags", h.assignTags},
		{"DELETE /templates/tags", h.removeTags},
	}
}

// requestBase is the scheme and host the caller reached the server at.
func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (h *Handler) fileUploadLink(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	if _, err := h.caller(ctx, r, true); err != nil {
		return err
	}
	hash := r.PathValue("hash")
	if !filesHashRe.MatchString(hash) {
		return badRequest("files hash %q is not a SHA-256 in hex", hash)
	}
	scope := scopeOf(apiKey(r))
	out := struct {
		Present bool   `json:"present"`
		URL     string `json:"url,omitempty"`
	}{Present: h.files.has(scope, hash)}
	if !out.Present {
		out.URL = h.files.uploadURL(requestBase(r), r.PathValue("templateID"), scope, hash)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// upload takes a signed upload (PUT to the URL fileUploadLink gave).
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	scope, ok := h.files.verify(r.URL.Query(), hash)
	if !filesHashRe.MatchString(hash) || !ok {
		writeError(w, http.StatusForbidden, "the upload URL is not valid (expired, or not signed by this server)")
		return
	}
	if r.ContentLength > MaxUploadBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the archive is larger than %d bytes", MaxUploadBytes))
		return
	}
	if err := h.files.put(scope, hash, r.Body); err != nil {
		h.writeErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// tplBase resolves the build's base: fromTemplate names an Airlock
// template (E2B's base and code-interpreter-v1 map as at create);
// fromImage the SDK's base image (Airlock's default template), an Airlock
// template of that name, or else an image to pull from its registry
// (returned as pull, with fromImageRegistry's credentials).
func (h *Handler) tplBase(ctx context.Context, c *client.Client, start tplBuildStart) (tplBase, *imagePull, error) {
	ref := "default"
	switch {
	case hasRegistry(start.FromImageRegistry) && (start.FromImage == nil || *start.FromImage == ""):
		return tplBase{}, nil, badRequest("fromImageRegistry goes with fromImage")
	case start.FromTemplate != nil && *start.FromTemplate != "":
		ref = nativeTemplate(*start.FromTemplate)
	case start.FromImage != nil && *start.FromImage != "":
		img := *start.FromImage
		auth, err := parseRegistryAuth(start.FromImageRegistry)
		if err != nil {
			return tplBase{}, nil, err
		}
		if auth == nil && (img == e2bBaseImage || img == e2bBaseImage+":latest") {
			break
		}
		if auth == nil {
			if _, err := model.ParseTemplateRef(img); err == nil {
				if _, err := c.GetTemplate(ctx, img); err == nil {
					ref = img // a template of this server: kept as before
					break
				} else if !client.IsCode(err, apiv1.CodeTemplateNotFound) && !client.IsCode(err, apiv1.CodeNotFound) {
					return tplBase{}, nil, err
				}
			}
		}
		return tplBase{}, &imagePull{image: img, auth: auth}, nil
	}
	if _, err := c.GetTemplate(ctx, ref); err != nil {
		if client.IsCode(err, apiv1.CodeTemplateNotFound) || client.IsCode(err, apiv1.CodeNotFound) {
			return tplBase{}, nil, badRequest("base %q is not a template of this server (use fromImage to pull an image from a registry, or import it with airlock template import)", ref)
		}
		return tplBase{}, nil, err
	}
	base, err := h.baseOf(ctx, ref)
	return base, nil, err
}

// baseOf is ref as a base: whether it has E2B's user.
func (h *Handler) baseOf(ctx context.Context, ref string) (tplBase, error) {
	hasUser := false
	if h.cfg.TemplateHasUser != nil {
		var err error
		if hasUser, err = h.cfg.TemplateHasUser(ctx, ref, e2bUser); err != nil {
			return tplBase{}, err
		}
	}
	return tplBase{Ref: ref, HasUser: hasUser}, nil
}

// templatePair answers GET /templates/aliases/{alias} and GET
// /templates/{templateID}/tags (one pattern: the two overlap).
func (h *Handler) templatePair(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "aliases":
		return h.aliasExists(ctx, w, b, c)
	case b == "tags":
		return h.templateTags(ctx, w, a, c)
	}
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no route GET %s", r.URL.Path)}
}

func (h *Handler) aliasExists(ctx context.Context, w http.ResponseWriter, alias string, c *client.Client) error {
	if _, err := c.GetTemplate(ctx, nativeTemplate(alias)); err != nil {
		if client.IsCode(err, apiv1.CodeTemplateNotFound) || client.IsCode(err, apiv1.CodeNotFound) || client.IsCode(err, apiv1.CodeInvalidRequest) {
			return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("template %s not found", alias)}
		}
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		TemplateID string `json:"templateID"`
		Public     bool   `json:"public"`
	}{alias, false})
	return nil
}

func (h *Handler) assignTags(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	if _, err := h.caller(ctx, r, true); err != nil {
		return err
	}
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	target, err := model.ParseTaggedName(nativeTemplate(req.Target))
	if err != nil {
		return badRequest("target %q: %v", req.Target, err)
	}
	if len(req.Tags) == 0 {
		return badRequest("tags are required")
	}
	var digest string
	for _, t := range req.Tags {
		nt, err := model.ParseTaggedName(target.Name.String() + ":" + t)
		if err != nil {
			return badRequest("tag %q: %v", t, err)
		}
		tpl, err := c.TagTemplate(ctx, target.String(), nt.String())
		if err != nil {
			return err
		}
		digest = tpl.Digest
	}
	writeJSON(w, http.StatusOK, struct {
		BuildID string   `json:"buildID"`
		Tags    []string `json:"tags"`
	}{digest, req.Tags})
	return nil
}

func (h *Handler) removeTags(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	if _, err := h.caller(ctx, r, true); err != nil {
		return err
	}
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	name, err := model.ParseTaggedName(nativeTemplate(req.Name))
	if err != nil {
		return badRequest("name %q: %v", req.Name, err)
	}
	for _, t := range req.Tags {
		nt, err := model.ParseTaggedName(name.Name.String() + ":" + t)
		if err != nil {
			return badRequest("tag %q: %v", t, err)
		}
		if _, err := c.DeleteTemplate(ctx, nt.String()); err != nil {
			if client.IsCode(err, apiv1.CodeTemplateNotFound) {
				return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("template %s not found", nt)}
			}
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) templateTags(ctx context.Context, w http.ResponseWriter, id string, c *client.Client) error {
	name, err := model.ParseTaggedName(nativeTemplate(id))
	if err != nil {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("template %s not found", id)}
	}
	list, err := c.ListTemplates(ctx)
	if err != nil {
		return err
	}
	type tagOut struct {
		Tag       string    `json:"tag"`
		BuildID   string    `json:"buildID"`
		CreatedAt time.Time `json:"createdAt"`
	}
	out := []tagOut{}
	for _, t := range list.Templates {
		for _, n := range t.Names {
			if tag, ok := strings.CutPrefix(n, name.Name.String()+":"); ok {
				out = append(out, tagOut{Tag: tag, BuildID: t.Digest, CreatedAt: t.CreatedAt})
			}
		}
	}
	if len(out) == 0 {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("template %s not found", id)}
	}
	slices.SortFunc(out, func(a, b tagOut) int { return strings.Compare(a.Tag, b.Tag) })
	writeJSON(w, http.StatusOK, out)
	return nil
}
