package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/template"
	"github.com/airlockdev/airlock/internal/template/gc"
)

// TemplateCollector deletes templates' trees and collects unused templates
// (internal/template/gc.Collector).
type TemplateCollector interface {
	Collect(ctx context.Context) (gc.Result, error)
	RemoveDeleted(ctx context.Context, d model.TemplateDigest) error
}

// templateViews is templateOut with how many live sandboxes use each
// template: every project's for an admin, the caller's project's for
// anyone else (templates are shared; other projects' sandboxes are not
// the caller's to count).
func (a *API) templateViews(ctx context.Context, p principal, ts ...model.Template) ([]apiv1.Template, error) {
	scope := store.OnlyProject(p.project)
	if p.role == model.RoleAdmin {
		scope = store.AllProjects()
	}
	digests := make([]model.TemplateDigest, len(ts))
	for i, t := range ts {
		digests[i] = t.Digest
	}
	var users map[model.TemplateDigest]int
	var err error
	if len(ts) == 1 {
		users, err = a.cfg.Store.CountTemplateUsers(ctx, scope, digests...)
	} else {
		users, err = a.cfg.Store.CountTemplateUsers(ctx, scope)
	}
	if err != nil {
		return nil, err
	}
	out := make([]apiv1.Template, len(ts))
	for i, t := range ts {
		out[i] = templateOut(t)
		n := users[t.Digest]
		out[i].InUse = &n
	}
	return out, nil
}

// templateConfig is the runtime configuration in a template's manifest, nil
// if the manifest does not parse.
func templateConfig(manifest []byte) *apiv1.TemplateConfig {
	m, err := template.ParseManifest(manifest)
	if err != nil {
		return nil
	}
	c := m.Config
	env := c.Env
	if env == nil {
		env = []string{}
	}
	out := &apiv1.TemplateConfig{Env: env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd,
		StartCmd: c.StartCmd, ReadyCmd: c.ReadyCmd}
	if c.ReadyCmd != "" {
		out.ReadyTimeoutMS = c.ReadyTimeout().Milliseconds()
	}
	return out
}

// parseRefPath parses the {ref} path value: a digest, name or name:tag.
func parseRefPath(r *http.Request) (model.TemplateRef, error) {
	ref, err := model.ParseTemplateRef(r.PathValue("ref"))
	if err != nil {
		return model.TemplateRef{}, badRequest("template reference: %s", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "))
	}
	return ref, nil
}

func templateNotFound(ref fmt.Stringer) error {
	return errorf(apiv1.CodeTemplateNotFound, "template %s not found", ref)
}

// resolve answers template_not_found for an unknown reference.
func (a *API) resolve(ctx context.Context, ref model.TemplateRef) (model.Template, error) {
	t, err := a.cfg.Store.ResolveTemplate(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return model.Template{}, templateNotFound(ref)
	}
	if err != nil {
		return model.Template{}, fmt.Errorf("resolve template %s: %w", ref, err)
	}
	return t, nil
}

// getTemplate: GET /v1/templates/{ref} → 200 Template, with its
// configuration and how many live sandboxes use it.
func (a *API) getTemplate(w http.ResponseWriter, r *http.Request, p principal) {
	ref, err := parseRefPath(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	t, err := a.resolve(r.Context(), ref)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	views, err := a.templateViews(r.Context(), p, t)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("template %s users: %w", t.Digest, err))
		return
	}
	writeJSON(w, http.StatusOK, views[0])
}

// setTemplateTag: PUT /v1/templates/tags/{name_tag} (admin) → 200 Template:
// points the tag at the template its body names, creating or moving it.
func (a *API) setTemplateTag(ctx context.Context, c *call[apiv1.SetTemplateTagRequest]) (*reply, error) {
	name, err := model.ParseTaggedName(c.r.PathValue("name_tag"))
	if err != nil {
		return nil, err
	}
	if !c.present["template"] {
		return nil, badRequest("template is required: the digest or name[:tag] of the template to tag")
	}
	ref, err := model.ParseTemplateRef(c.in.Template)
	if err != nil {
		return nil, err
	}
	t, err := a.resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := a.cfg.Store.SetTemplateName(ctx, name, t.Digest, c.now); err != nil {
		if errors.Is(err, store.ErrNotFound) { // deleted meanwhile
			return nil, templateNotFound(ref)
		}
		return nil, fmt.Errorf("tag template %s %s: %w", t.Digest, name, err)
	}
	d := t.Digest
	if t, err = a.cfg.Store.GetTemplate(ctx, d); err != nil {
		return nil, fmt.Errorf("read template %s back: %w", d, err)
	}
	views, err := a.templateViews(ctx, c.p, t)
	if err != nil {
		return nil, fmt.Errorf("template %s users: %w", t.Digest, err)
	}
	a.log.InfoContext(ctx, "template tagged", "tag", name, "digest", t.Digest, "by", c.p.keyID)
	return a.replyRecorded(ctx, c, http.StatusOK, views[0])
}

// deleteTemplate: DELETE /v1/templates/{ref} (admin) → 200
// TemplateDeleted. By name[:tag] it removes that tag; by digest the
// template, its tags and its tree on disk. Both are refused while live
// sandboxes use the digest.
func (a *API) deleteTemplate(ctx context.Context, c *call[noBody]) (*reply, error) {
	ref, err := parseRefPath(c.r)
	if err != nil {
		return nil, err
	}
	out := apiv1.TemplateDeleted{RemovedTags: []string{}}
	if name, ok := ref.Name(); ok {
		d, err := a.cfg.Store.DeleteTemplateTag(ctx, name)
		if err != nil {
			return nil, templateDeleteError(ref, err)
		}
		out.Digest, out.RemovedTags = d.String(), []string{name.String()}
		a.log.InfoContext(ctx, "template tag deleted", "tag", name, "digest", d, "by", c.p.keyID)
	} else {
		d, _ := ref.Digest()
		tags, err := a.cfg.Store.DeleteTemplate(ctx, d, c.now)
		if err != nil {
			return nil, templateDeleteError(ref, err)
		}
		out.Digest, out.Deleted = d.String(), true
		for _, t := range tags {
			out.RemovedTags = append(out.RemovedTags, t.String())
		}
		a.log.InfoContext(ctx, "template deleted", "digest", d, "tags", out.RemovedTags, "by", c.p.keyID)
		if a.cfg.TemplateGC != nil {
			// The row is tombstoned; the tree may go now. If it cannot, the
			// collector's next run takes it.
			if err := a.cfg.TemplateGC.RemoveDeleted(ctx, d); err != nil {
				a.log.WarnContext(ctx, "template tree left for the collector", "digest", d, "err", err)
			}
		}
	}
	return a.replyRecorded(ctx, c, http.StatusOK, out)
}

func templateDeleteError(ref model.TemplateRef, err error) error {
	var iu *store.TemplateInUseError
	switch {
	case errors.As(err, &iu):
		return errorf(apiv1.CodeTemplateInUse, "template %s is in use: %s", ref, iu.Error())
	case errors.Is(err, store.ErrNotFound):
		return templateNotFound(ref)
	}
	return fmt.Errorf("delete template %s: %w", ref, err)
}

// collectTemplates: POST /v1/admin/templates/gc (admin) → 200
// TemplateGCResult.
func (a *API) collectTemplates(ctx context.Context, c *call[noBody]) (*reply, error) {
	if a.cfg.TemplateGC == nil {
		return nil, errorf(apiv1.CodeNotSupported, "this server does not collect templates")
	}
	res, err := a.cfg.TemplateGC.Collect(ctx)
	if err != nil {
		return nil, fmt.Errorf("template gc: %w", err)
	}
	out := apiv1.TemplateGCResult{Collected: digestStrings(res.Collected), TreesRemoved: digestStrings(res.TreesRemoved), Busy: res.Busy}
	a.log.InfoContext(ctx, "template gc requested", "collected", len(out.Collected), "trees_removed", len(out.TreesRemoved), "by", c.p.keyID)
	return a.replyRecorded(ctx, c, http.StatusOK, out)
}

func digestStrings(ds []model.TemplateDigest) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

// replyRecorded answers v and stores the idempotency record, if any.
func (a *API) replyRecorded(ctx context.Context, c interface {
	reply(int, any) (*reply, *store.IdempotencyRecord, error)
}, status int, v any) (*reply, error) {
	rep, rec, err := c.reply(status, v)
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}
