package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// TemplateDistributor moves templates between this node's template store
// and the blob store shared by nodes (*distribute.Distributor is one).
type TemplateDistributor interface {
	// Publish pushes a local template and returns its tree archive's digest.
	Publish(ctx context.Context, d model.TemplateDigest) (blobstore.Digest, error)
	// Fetch pulls a template by digest unless it is here already.
	Fetch(ctx context.Context, d model.TemplateDigest) (template.Imported, error)
}

// fetchTemplate imports template d from the blob store (POST /v1/templates
// with a digest source).
func (a *API) fetchTemplate(ctx context.Context, d model.TemplateDigest) (template.Imported, error) {
	if a.cfg.Distribution == nil {
		return template.Imported{}, errorf(http.StatusNotImplemented, apiv1.CodeNotSupported,
			"source %s: this server has no blob store to pull templates from (start it with --blob-store)", d)
	}
	imp, err := a.cfg.Distribution.Fetch(ctx, d)
	switch {
	case errors.Is(err, template.ErrNotFound):
		return template.Imported{}, errorf(http.StatusBadRequest, apiv1.CodeTemplateNotFound,
			"template %s is not in the blob store: %s", d, err.Error())
	case errors.Is(err, template.ErrCorrupt):
		return template.Imported{}, errorf(http.StatusBadGateway, apiv1.CodeBlobStoreCorrupt,
			"template %s in the blob store is corrupt; nothing was imported: %s", d, err.Error())
	case err != nil:
		return template.Imported{}, errorf(http.StatusBadGateway, apiv1.CodeBlobStoreUnavailable,
			"cannot pull template %s from the blob store: %s", d, err.Error())
	}
	return imp, nil
}

// publishTemplate pushes a newly recorded template to the blob store, if
// the server has one.
func (a *API) publishTemplate(ctx context.Context, d model.TemplateDigest) error {
	if a.cfg.Distribution == nil {
		return nil
	}
	if _, err := a.cfg.Distribution.Publish(ctx, d); err != nil {
		return errorf(http.StatusBadGateway, apiv1.CodeBlobStoreUnavailable,
			"template %s was imported on this node but could not be pushed to the blob store (import again to retry): %s", d, err.Error())
	}
	return nil
}
