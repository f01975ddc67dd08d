package control

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
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
// The builds E2B asked for live in this server's memory (at most
// maxTplBuilds; a restart forgets them: their status is then 404, their
// templates stay). startCmd and readyCmd are refused (501): Airlock does
// not run a template's start command at create.

// maxTplBuilds bounds the E2B builds remembered.
const maxTplBuilds = 1000

// maxLogEntries is how many log entries one status call answers (E2B's).
const maxLogEntries = 100

// tplBuild is one E2B build.
type tplBuild struct {
	id, templateID string
	scope          string
	name           model.TaggedName // what the build names
	tags           []string         // further tags of name's name
	native         string           // the native build, once started
	tagged         bool             // tags pointed at the result
	created        time.Time
	// A fromImage pulled first (tplimage.go): the native import, the
	// image, and the steps to build on it once it is in.
	pull     string
	image    string
	start    *tplBuildStart
	starting bool   // a status call is starting the recipe build
	failed   string // why the recipe could not start after the pull
}

// tplBuilds remembers E2B builds.
type tplBuilds struct {
	mu     sync.Mutex
	builds map[string]*tplBuild
}

func (t *tplBuilds) add(b *tplBuild) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.builds) >= maxTplBuilds {
		var oldest *tplBuild
		for _, x := range t.builds {
			if oldest == nil || x.created.Before(oldest.created) {
				oldest = x
			}
		}
		delete(t.builds, oldest.id)
	}
	t.builds[b.id] = b
}

// get returns a copy of scope's build id of templateID.
func (t *tplBuilds) get(scope, templateID, id string) (tplBuild, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.builds[id]
	if !ok || b.scope != scope || b.templateID != templateID {
		return tplBuild{}, false
	}
	return *b, true
}

func (t *tplBuilds) update(id string, fn func(*tplBuild)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.builds[id]; ok {
		fn(b)
	}
}

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

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (h *Handler) requestBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var req struct {
		Name  string   `json:"name"`
		Alias string   `json:"alias"`
		Tags  []string `json:"tags"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		req.Name = req.Alias
	}
	if req.Name == "" {
		return badRequest("name is required")
	}
	name, err := model.ParseTaggedName(req.Name)
	if err != nil {
		return badRequest("name %q: %v", req.Name, err)
	}
	for _, t := range req.Tags {
		if _, err := model.ParseTaggedName(name.Name.String() + ":" + t); err != nil {
			return badRequest("tag %q: %v", t, err)
		}
	}
	if len(req.Tags) > 32 {
		return badRequest("at most 32 tags")
	}
	h.files.tidy()
	b := &tplBuild{id: newUUID(), templateID: name.Name.String(), scope: scopeOf(apiKey(r)), name: name, tags: req.Tags, created: time.Now()}
	if len(req.Tags) > 0 && !strings.Contains(req.Name, ":") {
		// Tags given, none in the name: the build names the first.
		b.name, _ = model.ParseTaggedName(name.Name.String() + ":" + req.Tags[0])
		b.tags = req.Tags[1:]
	}
	h.tplBuilds.add(b)
	names := []string{b.name.String()}
	for _, t := range b.tags {
		names = append(names, name.Name.String()+":"+t)
	}
	tags := append([]string{b.name.Tag.String()}, b.tags...)
	writeJSON(w, http.StatusAccepted, struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Aliases    []string `json:"aliases"`
		Names      []string `json:"names"`
		Tags       []string `json:"tags"`
		Public     bool     `json:"public"`
	}{b.templateID, b.id, []string{b.templateID}, names, tags, false})
	return nil
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

func (h *Handler) startBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	scope := scopeOf(apiKey(r))
	b, ok := h.tplBuilds.get(scope, r.PathValue("templateID"), r.PathValue("buildID"))
	if !ok {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("build %s of template %s not found", r.PathValue("buildID"), r.PathValue("templateID"))}
	}
	if b.native != "" || b.pull != "" {
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("build %s has started already", b.id)}
	}
	var start tplBuildStart
	if err := decodeBody(r, &start); err != nil {
		return err
	}
	if start.StartCmd != nil && *start.StartCmd != "" || start.ReadyCmd != nil && *start.ReadyCmd != "" {
		return notImplemented("startCmd and readyCmd are not supported by Airlock: a sandbox does not run a template's start command at create")
	}
	base, pull, err := h.tplBase(ctx, c, start)
	if err != nil {
		return err
	}
	if pull != nil {
		// Checked now (a bad step is a 400 at once), built once the image
		// is in (tplimage.go).
		if _, err := h.recipeFor(b.id, scope, start, tplBase{Ref: "default"}); err != nil {
			return err
		}
		if err := h.startPull(ctx, c, b, start, *pull); err != nil {
			return err
		}
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	if err := h.startRecipe(ctx, c, b, start, base); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// recipeFor translates start onto base, the COPY sources laid out in the
// build's context directory (made anew).
func (h *Handler) recipeFor(id, scope string, start tplBuildStart, base tplBase) (apiv1.ImportTemplateRequest, error) {
	ctxDir, err := h.files.newContext(id)
	if err != nil {
		return apiv1.ImportTemplateRequest{}, err
	}
	doc, err := translate(start, base, buildFiles{store: h.files, scope: scope, ctxDir: ctxDir})
	if err != nil {
		return apiv1.ImportTemplateRequest{}, err
	}
	text, err := json.Marshal(doc)
	if err != nil {
		return apiv1.ImportTemplateRequest{}, err
	}
	return apiv1.ImportTemplateRequest{Recipe: string(text) + "\n", Context: ctxDir}, nil
}

// startRecipe queues b's recipe on base natively.
func (h *Handler) startRecipe(ctx context.Context, c *client.Client, b tplBuild, start tplBuildStart, base tplBase) error {
	req, err := h.recipeFor(b.id, b.scope, start, base)
	if err != nil {
		return err
	}
	req.Name = b.name.String()
	nb, err := c.ImportTemplate(ctx, req)
	if err != nil {
		return err
	}
	h.tplBuilds.update(b.id, func(x *tplBuild) { x.native = nb.ID })
	return nil
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

func (h *Handler) buildStatus(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	scope := scopeOf(apiKey(r))
	b, ok := h.tplBuilds.get(scope, r.PathValue("templateID"), r.PathValue("buildID"))
	if !ok {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("build %s of template %s not found", r.PathValue("buildID"), r.PathValue("templateID"))}
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		if _, err := fmt.Sscan(v, &offset); err != nil || offset < 0 {
			return badRequest("logsOffset %q is not a non-negative integer", v)
		}
	}
	type logEntry struct {
		Timestamp time.Time `json:"timestamp"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
	}
	out := struct {
		BuildID    string     `json:"buildID"`
		TemplateID string     `json:"templateID"`
		Status     string     `json:"status"`
		LogEntries []logEntry `json:"logEntries"`
		Logs       []string   `json:"logs"`
		Reason     *struct {
			Message string `json:"message"`
		} `json:"reason,omitempty"`
	}{BuildID: b.id, TemplateID: b.templateID, LogEntries: []logEntry{}, Logs: []string{}}
	st, err := h.tplState(ctx, c, b)
	if err != nil {
		return err
	}
	out.Status = st.status
	if st.status == "ready" {
		if err := h.tagBuild(ctx, c, b); err != nil {
			return err
		}
	}
	if st.reason != "" {
		out.Reason = &struct {
			Message string `json:"message"`
		}{st.reason}
	}
	now := time.Now().UTC()
	for i := offset; i < len(st.lines) && len(out.LogEntries) < maxLogEntries; i++ {
		level := "info"
		if strings.HasPrefix(st.lines[i], "airlock: failed") {
			level = "error"
		}
		out.LogEntries = append(out.LogEntries, logEntry{Timestamp: now, Level: level, Message: st.lines[i]})
		out.Logs = append(out.Logs, st.lines[i])
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// tplStatus is an E2B build's state: E2B's status (waiting, building,
// ready, error), the reason of an error, and the log's lines so far.
type tplStatus struct {
	status, reason string
	lines          []string
}

// tplState reads b's state from its native builds: the pull of its
// fromImage (starting the recipe once it is in) and the recipe.
func (h *Handler) tplState(ctx context.Context, c *client.Client, b tplBuild) (tplStatus, error) {
	var st tplStatus
	if b.pull != "" {
		pb, lines, err := nativeBuild(ctx, c, b.pull)
		if err != nil {
			return st, err
		}
		st.lines = lines
		if pb.State == "failed" || b.native == "" {
			if done, err := h.advancePull(ctx, c, b, pb, &st); done || err != nil {
				return st, err
			}
			if b, _ = h.tplBuilds.get(b.scope, b.templateID, b.id); b.native == "" {
				st.status = "building"
				return st, nil
			}
		}
	}
	if b.native == "" {
		st.status = "waiting"
		return st, nil
	}
	nb, lines, err := nativeBuild(ctx, c, b.native)
	if err != nil {
		return st, err
	}
	st.lines = append(st.lines, lines...)
	switch nb.State {
	case "pending":
		st.status = "waiting"
	case "running":
		st.status = "building"
	case "succeeded":
		st.status = "ready"
	case "failed":
		st.status, st.reason = "error", "the build failed"
		if nb.Error != nil {
			st.reason = nb.Error.Message
		}
	}
	return st, nil
}

// nativeBuild reads native build id and its log's lines.
func nativeBuild(ctx context.Context, c *client.Client, nid string) (apiv1.Build, []string, error) {
	id, err := model.ParseBuildID(nid)
	if err != nil {
		return apiv1.Build{}, nil, err
	}
	var text strings.Builder
	nb, err := c.FollowBuild(ctx, id, false, func(ev client.BuildEvent) error {
		text.WriteString(ev.Log)
		return nil
	})
	if err != nil || text.Len() == 0 {
		return nb, nil, err
	}
	return nb, strings.Split(strings.TrimRight(text.String(), "\n"), "\n"), nil
}

// tagBuild points b's further tags at its template, once.
func (h *Handler) tagBuild(ctx context.Context, c *client.Client, b tplBuild) error {
	if b.tagged {
		return nil
	}
	for _, t := range b.tags {
		if _, err := c.TagTemplate(ctx, b.name.String(), b.name.Name.String()+":"+t); err != nil {
			return err
		}
	}
	h.tplBuilds.update(b.id, func(x *tplBuild) { x.tagged = true })
	return nil
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
