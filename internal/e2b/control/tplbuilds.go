package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// E2B builds as records (Config.Builds, kept by the store):
//
//   - requestBuild stores one (waiting) in the caller's project;
//   - startBuild validates the steps and lays out the files in a context
//     directory of its own, then moves the record to starting (one start
//     wins; a refused start leaves the build waiting, as it was), queues the
//     native build and records it (building). A native build that cannot
//     be queued ends the build in error;
//   - buildStatus reads the record and, once it has a native build, that
//     build's state and log; the first to see the native build end records
//     the end (ready once the further tags point at the template).
//
// A server that stops while starting a build leaves it starting: its
// restart ends its own in error (ReconcileBuilds), and a status call ends
// any other server's after startGrace.

// BuildRecords keeps E2B builds (store.E2BBuilds; errors wrap
// ErrBuildNotFound and ErrBuildStateChanged as the store's do).
type BuildRecords interface {
	CreateE2BBuild(ctx context.Context, b model.E2BBuild) error
	GetE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID) (model.E2BBuild, error)
	StartE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID, node model.NodeID, files []string, now time.Time) (model.E2BBuild, error)
	SetE2BBuildNative(ctx context.Context, id model.E2BBuildID, native model.BuildID, now time.Time) error
	ReplaceE2BBuildNative(ctx context.Context, id model.E2BBuildID, from, to model.BuildID, now time.Time) error
	EndE2BBuild(ctx context.Context, id model.E2BBuildID, status model.E2BBuildStatus, reason string, now time.Time) error
	FailStartingE2BBuilds(ctx context.Context, node model.NodeID, before time.Time, reason string, now time.Time) (int, error)
	PruneE2BBuilds(ctx context.Context, before time.Time) (int, error)
}

// Errors BuildRecords' errors wrap.
var (
	ErrBuildNotFound     = errors.New("e2b build not found")
	ErrBuildStateChanged = errors.New("e2b build state changed")
)

// Caller is what the server knows of an API key.
type Caller struct {
	Project model.ProjectID
	Admin   bool
}

// startGrace is how long a build may stay starting on a server that is
// not asked before a status call ends it (its start is one native call).
const startGrace = 10 * time.Minute

// maxLogEntries is how many log entries one status call answers (E2B's).
const maxLogEntries = 100

// buildsKeep is how long a build's record is kept after its last change.
const buildsKeep = 7 * 24 * time.Hour

// Reasons of builds ended by the reconcilers.
const (
	reasonRestarted = "the server stopped while starting this build (its native build may not have been queued): start a new build"
	reasonStalled   = "the server starting this build stopped answering: start a new build"
)

// needAdmin is E2B's 403 for a key that may not build templates.
var needAdmin = &httpError{status: http.StatusForbidden, msg: "building, tagging or deleting templates needs an Airlock admin API key: " +
	"templates are shared by every project of this server (a template name is global and any project may create sandboxes from it), " +
	"so a project's key may use templates but not make them; ask an admin to build it (docs/e2b.md, \"Templates as code\")"}

// caller resolves the request's key; an admin key is needed when admin.
func (h *Handler) caller(ctx context.Context, r *http.Request, admin bool) (Caller, error) {
	c, ok, err := h.cfg.Caller(ctx, apiKey(r))
	if err != nil {
		return Caller{}, err
	}
	if !ok {
		return Caller{}, &httpError{status: http.StatusUnauthorized, msg: "invalid API key"}
	}
	if admin && !c.Admin {
		return Caller{}, needAdmin
	}
	return c, nil
}

// ReconcileBuilds ends in error the builds this server (Config.Node) left
// starting when it stopped; run it at start, before serving.
func (h *Handler) ReconcileBuilds(ctx context.Context) error {
	if h.files == nil {
		return nil
	}
	now := time.Now()
	n, err := h.cfg.Builds.FailStartingE2BBuilds(ctx, h.cfg.Node, now, reasonRestarted, now)
	if err != nil {
		return fmt.Errorf("e2b builds left starting: %w", err)
	}
	if n > 0 {
		h.log.Warn("e2b template builds left starting by the previous run ended in error", "count", n)
	}
	return nil
}

func (h *Handler) requestBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	who, err := h.caller(ctx, r, true)
	if err != nil {
		return err
	}
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
	if len(req.Tags) > model.MaxE2BBuildTags {
		return badRequest("at most %d tags", model.MaxE2BBuildTags)
	}
	var tags []model.TemplateTag
	for _, t := range req.Tags {
		tag, err := model.ParseTemplateTag(t)
		if err != nil {
			return badRequest("tag %q: %v", t, err)
		}
		tags = append(tags, tag)
	}
	h.files.tidy()
	now := time.Now()
	if _, err := h.cfg.Builds.PruneE2BBuilds(ctx, now.Add(-buildsKeep)); err != nil {
		return err
	}
	b := model.E2BBuild{ID: model.NewE2BBuildID(), ProjectID: who.Project, TemplateID: name.Name, Name: name, Tags: tags,
		Status: model.E2BBuildWaiting, CreatedAt: now}
	if len(tags) > 0 && !strings.Contains(req.Name, ":") {
		// Tags given, none in the name: the build names the first.
		b.Name.Tag, b.Tags = tags[0], tags[1:]
	}
	if err := h.cfg.Builds.CreateE2BBuild(ctx, b); err != nil {
		return err
	}
	names := []string{b.Name.String()}
	outTags := []string{b.Name.Tag.String()}
	for _, t := range b.Tags {
		names = append(names, name.Name.String()+":"+t.String())
		outTags = append(outTags, t.String())
	}
	writeJSON(w, http.StatusAccepted, struct {
		TemplateID string   `json:"templateID"`
		BuildID    string   `json:"buildID"`
		Aliases    []string `json:"aliases"`
		Names      []string `json:"names"`
		Tags       []string `json:"tags"`
		Public     bool     `json:"public"`
	}{b.TemplateID.String(), b.ID.String(), []string{b.TemplateID.String()}, names, outTags, false})
	return nil
}

// callersBuild resolves the caller (an admin when admin) and the build of
// its project the path names.
func (h *Handler) callersBuild(ctx context.Context, r *http.Request, admin bool) (Caller, model.E2BBuild, error) {
	who, err := h.caller(ctx, r, admin)
	if err != nil {
		return Caller{}, model.E2BBuild{}, err
	}
	b, err := h.getBuild(ctx, r, who)
	return who, b, err
}

// getBuild returns the caller's build the path names; another project's,
// another template's or a malformed ID is a 404, as an unknown one.
func (h *Handler) getBuild(ctx context.Context, r *http.Request, who Caller) (model.E2BBuild, error) {
	notFound := &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("build %s of template %s not found", r.PathValue("buildID"), r.PathValue("templateID"))}
	id, err := model.ParseE2BBuildID(r.PathValue("buildID"))
	if err != nil {
		return model.E2BBuild{}, notFound
	}
	b, err := h.cfg.Builds.GetE2BBuild(ctx, who.Project, id)
	if errors.Is(err, ErrBuildNotFound) || err == nil && b.TemplateID.String() != r.PathValue("templateID") {
		return model.E2BBuild{}, notFound
	}
	return b, err
}

func (h *Handler) startBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	who, b, err := h.callersBuild(ctx, r, true)
	if err != nil {
		return err
	}
	started := &httpError{status: http.StatusConflict, msg: fmt.Sprintf("build %s has started already", b.ID)}
	if b.Status != model.E2BBuildWaiting {
		return started
	}
	var start tplBuildStart
	if err := decodeBody(r, &start); err != nil {
		return err
	}
	base, pull, err := h.tplBase(ctx, c, start)
	if err != nil {
		return err
	}
	scope := scopeOf(apiKey(r))
	if pull != nil {
		// The steps are checked now (a bad step is a 400 at once, the
		// build stays waiting) and queued on the image once it is in
		// (tplimage.go).
		ctxDir, _, err := h.layRecipe(b, start, tplBase{Ref: "default"}, scope)
		if err != nil {
			return err
		}
		_ = h.files.removeContext(ctxDir)
	}
	var hashes []string
	for _, st := range start.Steps {
		if st.FilesHash != "" {
			hashes = append(hashes, st.FilesHash)
		}
	}
	var native model.BuildID
	if pull == nil {
		// Laid out before the start is recorded: a refused start leaves
		// the build waiting.
		ctxDir, text, err := h.layRecipe(b, start, base, scope)
		if err != nil {
			return err
		}
		if _, err := h.cfg.Builds.StartE2BBuild(ctx, who.Project, b.ID, h.cfg.Node, hashes, time.Now()); err != nil {
			_ = h.files.removeContext(ctxDir)
			if errors.Is(err, ErrBuildStateChanged) {
				return started
			}
			return err
		}
		native, err = h.importRecipe(ctx, c, b, ctxDir, text)
		if err != nil {
			h.failStart(ctx, b, err)
			return err
		}
	} else {
		if _, err := h.cfg.Builds.StartE2BBuild(ctx, who.Project, b.ID, h.cfg.Node, hashes, time.Now()); err != nil {
			if errors.Is(err, ErrBuildStateChanged) {
				return started
			}
			return err
		}
		nb, err := h.queuePull(ctx, c, *pull)
		if err == nil {
			native, err = model.ParseBuildID(nb.ID)
		}
		if err != nil {
			h.failStart(ctx, b, err)
			return err
		}
		h.pulls.put(b.ID, pendingPull{start: start, scope: scope})
	}
	if err := h.cfg.Builds.SetE2BBuildNative(context.WithoutCancel(ctx), b.ID, native, time.Now()); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// layRecipe checks start's steps on base and lays out the files they copy
// in a context directory of this attempt's own (two starts never share
// one); it returns the directory and the native recipe.
func (h *Handler) layRecipe(b model.E2BBuild, start tplBuildStart, base tplBase, scope string) (string, string, error) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	ctxDir, err := h.files.newContext(b.ID.String() + "." + hex.EncodeToString(suffix))
	if err != nil {
		return "", "", err
	}
	doc, err := translate(start, base, buildFiles{store: h.files, scope: scope, ctxDir: ctxDir})
	if err == nil {
		var text []byte
		if text, err = json.Marshal(doc); err == nil {
			return ctxDir, string(text), nil
		}
	}
	_ = h.files.removeContext(ctxDir)
	return "", "", err
}

// importRecipe queues the native build of recipe text over ctxDir, naming
// b's template; a refusal removes ctxDir.
func (h *Handler) importRecipe(ctx context.Context, c *client.Client, b model.E2BBuild, ctxDir, text string) (model.BuildID, error) {
	nb, err := c.ImportTemplate(ctx, apiv1.ImportTemplateRequest{Recipe: text + "\n", Context: ctxDir, Name: b.Name.String()})
	if err != nil {
		_ = h.files.removeContext(ctxDir)
		return "", err
	}
	return model.ParseBuildID(nb.ID)
}

// queueRecipe lays out and queues start's steps on base for b.
func (h *Handler) queueRecipe(ctx context.Context, c *client.Client, b model.E2BBuild, start tplBuildStart, base tplBase, scope string) (model.BuildID, error) {
	ctxDir, text, err := h.layRecipe(b, start, base, scope)
	if err != nil {
		return "", err
	}
	return h.importRecipe(ctx, c, b, ctxDir, text)
}

// failStart ends b, whose start was recorded, in error: nothing was queued.
func (h *Handler) failStart(ctx context.Context, b model.E2BBuild, err error) {
	if eerr := h.cfg.Builds.EndE2BBuild(context.WithoutCancel(ctx), b.ID, model.E2BBuildError, "queueing the build failed: "+err.Error(), time.Now()); eerr != nil {
		h.log.Warn("e2b build: recording a failed start", "build", b.ID, "err", eerr)
	}
}

func (h *Handler) buildStatus(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	who, b, err := h.callersBuild(ctx, r, false)
	if err != nil {
		return err
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		if _, err := fmt.Sscan(v, &offset); err != nil || offset < 0 {
			return badRequest("logsOffset %q is not a non-negative integer", v)
		}
	}
	if b.Status == model.E2BBuildStarting && time.Since(b.UpdatedAt) > startGrace {
		// Its server stopped answering mid-start (a restart of that
		// server would have ended it).
		now := time.Now()
		if _, err := h.cfg.Builds.FailStartingE2BBuilds(ctx, "", now.Add(-startGrace), reasonStalled, now); err != nil {
			return err
		}
		if b, err = h.getBuild(ctx, r, who); err != nil {
			return err
		}
	}
	type logEntry struct {
		Timestamp time.Time `json:"timestamp"`
		Level     string    `json:"level"`
		Message   string    `json:"message"`
	}
	type reason struct {
		Message string `json:"message"`
	}
	out := struct {
		BuildID    string     `json:"buildID"`
		TemplateID string     `json:"templateID"`
		Status     string     `json:"status"`
		LogEntries []logEntry `json:"logEntries"`
		Logs       []string   `json:"logs"`
		Reason     *reason    `json:"reason,omitempty"`
	}{BuildID: b.ID.String(), TemplateID: b.TemplateID.String(), Status: "waiting", LogEntries: []logEntry{}, Logs: []string{}}
	status, why := b.Status, b.Reason
	if b.Native != "" {
		var text strings.Builder
		nb, err := c.FollowBuild(ctx, b.Native, false, func(ev client.BuildEvent) error {
			text.WriteString(ev.Log)
			return nil
		})
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimRight(text.String(), "\n"), "\n")
		if text.Len() == 0 {
			lines = nil
		}
		now := time.Now().UTC()
		for i := offset; i < len(lines) && len(out.LogEntries) < maxLogEntries; i++ {
			level := "info"
			if strings.HasPrefix(lines[i], "airlock: failed") {
				level = "error"
			}
			out.LogEntries = append(out.LogEntries, logEntry{Timestamp: now, Level: level, Message: lines[i]})
			out.Logs = append(out.Logs, lines[i])
		}
		observe := h.observeNative
		if nb.Kind == "import" {
			observe = h.advancePull // the pull of a fromImage, the steps to follow
		}
		if status, why, err = observe(ctx, c, b, nb); err != nil {
			return err
		}
	}
	switch status {
	case model.E2BBuildBuilding:
		out.Status = "building"
	case model.E2BBuildReady:
		out.Status = "ready"
	case model.E2BBuildError:
		out.Status = "error"
		if why == "" {
			why = "the build failed"
		}
		out.Reason = &reason{why}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// observeNative records the end of b's native build nb, once: ready after
// pointing b's further tags at its template (a failure to tag leaves it
// building, for the next call to try again), error with the native
// build's message. It returns b's status and reason.
func (h *Handler) observeNative(ctx context.Context, c *client.Client, b model.E2BBuild, nb apiv1.Build) (model.E2BBuildStatus, string, error) {
	if b.Status.Ended() {
		return b.Status, b.Reason, nil
	}
	var status model.E2BBuildStatus
	why := ""
	switch nb.State {
	case "succeeded":
		for _, t := range b.Tags {
			if _, err := c.TagTemplate(ctx, b.Name.String(), b.Name.Name.String()+":"+t.String()); err != nil {
				return "", "", err
			}
		}
		status = model.E2BBuildReady
	case "failed":
		status, why = model.E2BBuildError, "the build failed"
		if nb.Error != nil {
			why = nb.Error.Message
		}
	default:
		return model.E2BBuildBuilding, "", nil
	}
	return h.endBuild(ctx, b, status, why)
}

// endBuild records the end of b (once): if another server or call ended
// it first, what that one recorded is answered.
func (h *Handler) endBuild(ctx context.Context, b model.E2BBuild, status model.E2BBuildStatus, why string) (model.E2BBuildStatus, string, error) {
	err := h.cfg.Builds.EndE2BBuild(context.WithoutCancel(ctx), b.ID, status, why, time.Now())
	if errors.Is(err, ErrBuildStateChanged) {
		// Another server (or call) recorded it first: answer what it did.
		cur, gerr := h.cfg.Builds.GetE2BBuild(ctx, b.ProjectID, b.ID)
		if gerr != nil {
			return "", "", gerr
		}
		return cur.Status, cur.Reason, nil
	}
	if err != nil {
		return "", "", err
	}
	return status, why, nil
}
