package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// listTemplates: GET /v1/templates → 200 TemplateList. Templates are shared
// by every project.
func (a *API) listTemplates(w http.ResponseWriter, r *http.Request, _ principal) {
	ts, err := a.cfg.Store.ListTemplates(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list templates: %w", err))
		return
	}
	views, err := a.templateViews(r.Context(), ts...)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("template users: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, apiv1.TemplateList{Templates: append(make([]apiv1.Template, 0, len(views)), views...)})
}

// templateSource is the parsed source of POST /v1/templates: a path on the
// server host or an OCI image reference.
type templateSource struct {
	path   string               // a clean absolute path, or ""
	digest model.TemplateDigest // a template to pull from the blob store, or ""
	image  template.ImageRef    // when path and digest are ""
}

func (s templateSource) String() string {
	if s.path != "" {
		return s.path
	}
	if s.digest != "" {
		return s.digest.String()
	}
	return s.image.String()
}

// Prefixes of the image reference forms that name a path on the server host.
var imagePathPrefixes = []string{"oci-layout:", "docker-archive:"}

const sourceForms = "a clean absolute path on the server host, a template digest sha256:… to pull from the blob store, or an image reference " +
	"(registry/repo:tag or registry/repo@sha256:… with a registry host, docker://REF, " +
	"oci-layout:/DIR or docker-archive:/FILE.tar)"

// parseTemplateSource parses src: a clean absolute path; "oci-layout:" or
// "docker-archive:" followed by a clean absolute path; "docker://" followed
// by any registry reference; or a registry reference whose first component
// names the registry host (holds a "." or ":", or is "localhost"), so that a
// relative path such as "rootfs" is refused rather than pulled from Docker
// Hub.
func parseTemplateSource(src string) (templateSource, error) {
	if src == "" {
		return templateSource{}, badRequest("source must be %s", sourceForms)
	}
	if strings.HasPrefix(src, "sha256:") {
		d, err := model.ParseTemplateDigest(src)
		if err != nil {
			return templateSource{}, badRequest("source %q: a template digest must be sha256:<64 lower-case hex characters>", src)
		}
		return templateSource{digest: d}, nil
	}
	if strings.HasPrefix(src, "/") {
		if filepath.Clean(src) != src {
			return templateSource{}, badRequest("source %q is not a clean absolute path", src)
		}
		return templateSource{path: src}, nil
	}
	pathForm := false
	for _, p := range imagePathPrefixes {
		loc, ok := strings.CutPrefix(src, p)
		if !ok {
			continue
		}
		if !filepath.IsAbs(loc) || filepath.Clean(loc) != loc {
			return templateSource{}, badRequest("source %q: the path after %q must be a clean absolute path on the server host", src, p)
		}
		pathForm = true
	}
	if !pathForm && !strings.HasPrefix(src, "docker://") && !hasRegistryHost(src) {
		return templateSource{}, badRequest("source %q must be %s", src, sourceForms)
	}
	ref, err := template.ParseImageRef(src)
	if err != nil {
		return templateSource{}, badRequest("source: %s", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "))
	}
	return templateSource{image: ref}, nil
}

// hasRegistryHost reports whether the first component of a registry
// reference names a registry host, as docker decides it.
func hasRegistryHost(src string) bool {
	host, _, ok := strings.Cut(src, "/")
	return ok && (strings.ContainsAny(host, ".:") || host == "localhost")
}

// importTemplate: POST /v1/templates (admin) → 201 Template. It imports a
// directory or tar archive on the server host, or an OCI image (from a
// registry, anonymously, or an OCI layout or docker archive on the server
// host), records the template and points the optional name at it. Importing
// is content-addressed, so a repeat imports nothing new; the idempotency
// record is stored after the import for the same reason.
func (a *API) importTemplate(ctx context.Context, c *call[apiv1.ImportTemplateRequest]) (*reply, error) {
	src, err := parseTemplateSource(c.in.Source)
	if err != nil {
		return nil, err
	}
	var name model.TaggedName
	if c.present["name"] {
		if name, err = model.ParseTaggedName(c.in.Name); err != nil {
			return nil, err
		}
	}
	// Hold off tree removal until the template is recorded: a tombstoned
	// template's tree that this import reuses must not go meanwhile.
	release, err := a.guardImport(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	var imp template.Imported
	switch {
	case src.digest != "":
		if imp, err = a.fetchTemplate(ctx, src.digest); err != nil {
			return nil, err
		}
	case src.path != "":
		imp, err = a.cfg.Templates.ImportPath(ctx, src.path, nil)
	default:
		// Anonymous access; plain HTTP only to loopback registries.
		imp, err = a.cfg.Templates.ImportImage(ctx, src.image, template.ImageOptions{}, nil)
	}
	if err != nil {
		return nil, importError(src, err)
	}
	if err := a.cfg.Store.PutTemplate(ctx, model.Template{
		Digest: imp.Digest, SizeBytes: imp.SizeBytes, Manifest: imp.Manifest, CreatedAt: c.now,
	}); err != nil {
		return nil, fmt.Errorf("record template %s: %w", imp.Digest, err)
	}
	if src.digest == "" { // a pulled template is in the blob store already
		if err := a.publishTemplate(ctx, imp.Digest); err != nil {
			return nil, err
		}
	}
	if name.Name != "" {
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

// importError maps an import failure to the API error it is answered with.
// A registry that answers "no such image" or "not allowed" is the request's
// fault (400); one that cannot be reached or fails is 502.
func importError(src templateSource, err error) error {
	var (
		te *transport.Error
		ue *url.Error
		ne net.Error
	)
	switch {
	case errors.As(err, &te):
		switch te.StatusCode {
		case http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
			return badRequest("cannot import %s: the registry answered %d (%s): the image does not exist or may not be read anonymously",
				src, te.StatusCode, registryDetail(te))
		}
		return errorf(http.StatusBadGateway, apiv1.CodeRegistryUnavailable, "cannot import %s: the registry answered %d: %s", src, te.StatusCode, registryDetail(te))
	case errors.Is(err, fs.ErrNotExist):
		return badRequest("source %s does not exist on the server host", src)
	case errors.Is(err, fs.ErrPermission):
		return badRequest("the server may not read source %s", src)
	case errors.Is(err, model.ErrInvalid):
		return badRequest("cannot import %s: %s", src, err.Error())
	case src.path == "" && src.image.Source() == template.ImageRegistry && (errors.As(err, &ue) || errors.As(err, &ne)):
		return errorf(http.StatusBadGateway, apiv1.CodeRegistryUnavailable, "cannot import %s: the registry could not be reached: %s", src, err.Error())
	}
	return fmt.Errorf("import template from %s: %w", src, err)
}

// registryDetail is the registry's own error codes, or its status text.
func registryDetail(te *transport.Error) string {
	var codes []string
	for _, d := range te.Errors {
		codes = append(codes, string(d.Code))
	}
	if len(codes) == 0 {
		return http.StatusText(te.StatusCode)
	}
	return strings.Join(codes, ", ")
}
