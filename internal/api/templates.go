package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// listTemplates: GET /v1/templates → 200 TemplateList. Templates are shared
// by every project.
func (a *API) listTemplates(w http.ResponseWriter, r *http.Request, _ principal) {
	ts, err := a.cfg.Store.ListTemplates(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list templates: %w", err))
		return
	}
	out := apiv1.TemplateList{Templates: make([]apiv1.Template, 0, len(ts))}
	for _, t := range ts {
		out.Templates = append(out.Templates, templateOut(t))
	}
	writeJSON(w, http.StatusOK, out)
}

// importTemplate: POST /v1/templates (admin) → 201 Template. It imports a
// directory or tar archive on the server host, records the template and
// points the optional name at it. Importing is content-addressed, so a
// repeat imports nothing new; the idempotency record is stored after the
// import for the same reason.
func (a *API) importTemplate(ctx context.Context, c *call[apiv1.ImportTemplateRequest]) (*reply, error) {
	src := c.in.Source
	if src == "" || !filepath.IsAbs(src) || filepath.Clean(src) != src {
		return nil, badRequest("source must be a clean absolute path on the server host")
	}
	var name model.TemplateName
	if c.present["name"] {
		var err error
		if name, err = model.ParseTemplateName(c.in.Name); err != nil {
			return nil, err
		}
	}
	imp, err := a.cfg.Templates.ImportPath(ctx, src, nil)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, badRequest("source %s does not exist on the server host", src)
	case errors.Is(err, fs.ErrPermission):
		return nil, badRequest("the server may not read source %s", src)
	case errors.Is(err, model.ErrInvalid):
		return nil, badRequest("cannot import %s: %s", src, err.Error())
	case err != nil:
		return nil, fmt.Errorf("import template from %s: %w", src, err)
	}
	if err := a.cfg.Store.PutTemplate(ctx, model.Template{
		Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: c.now,
	}); err != nil {
		return nil, fmt.Errorf("record template %s: %w", imp.Digest, err)
	}
	if name != "" {
		if err := a.cfg.Store.SetTemplateName(ctx, name, imp.Digest, c.now); err != nil {
			return nil, fmt.Errorf("name template %s %s: %w", imp.Digest, name, err)
		}
	}
	t, err := a.cfg.Store.GetTemplate(ctx, imp.Digest)
	if err != nil {
		return nil, fmt.Errorf("read template %s back: %w", imp.Digest, err)
	}
	a.log.InfoContext(ctx, "template imported", "digest", t.Digest, "name", name, "source", src,
		"bytes", imp.SizeBytes, "entries", imp.Entries, "reused", imp.Reused)
	rep, rec, err := c.reply(http.StatusCreated, templateOut(t))
	if err != nil {
		return nil, err
	}
	if err := a.putIdempotency(ctx, rec); err != nil {
		return nil, err
	}
	return rep, nil
}
