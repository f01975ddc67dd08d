package api

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// listTemplates: GET /v1/templates → 200 TemplateList. Templates are shared
// by every project.
func (a *API) listTemplates(w http.ResponseWriter, r *http.Request, p principal) {
	ts, err := a.cfg.Store.ListTemplates(r.Context())
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list templates: %w", err))
		return
	}
	views, err := a.templateViews(r.Context(), p, ts...)
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

// localPath is the server-host path the source names, if any.
func (s templateSource) localPath() string {
	if s.path != "" {
		return s.path
	}
	if s.image.Source() == template.ImageRegistry {
		return ""
	}
	return s.image.Path()
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
	if !pathForm && !strings.HasPrefix(src, "docker://") && !template.HasRegistryHost(src) {
		return templateSource{}, badRequest("source %q must be %s", src, sourceForms)
	}
	ref, err := template.ParseImageRef(src)
	if err != nil {
		return templateSource{}, badRequest("source: %s", strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "))
	}
	return templateSource{image: ref}, nil
}
