package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockdev/airlock/internal/apiv1"
)

// GetTemplate returns a template by digest, name or name:tag, with its
// configuration and how many live sandboxes use it (GET /v1/templates/{ref}).
func (c *Client) GetTemplate(ctx context.Context, ref string) (apiv1.Template, error) {
	var out apiv1.Template
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(ref)}, &out)
	return out, err
}

// TagTemplate points the tag nameTag (name or name:tag) at the template
// that ref names (PUT /v1/templates/tags/{name_tag}; admin keys only).
func (c *Client) TagTemplate(ctx context.Context, ref, nameTag string) (apiv1.Template, error) {
	var out apiv1.Template
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/templates/tags/" + url.PathEscape(nameTag),
		body: apiv1.SetTemplateTagRequest{Template: ref}}, &out)
	return out, err
}

// DeleteTemplate removes a tag (ref name or name:tag) or a template with its
// tags (ref a digest) (DELETE /v1/templates/{ref}; admin keys only).
func (c *Client) DeleteTemplate(ctx context.Context, ref string) (apiv1.TemplateDeleted, error) {
	var out apiv1.TemplateDeleted
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/templates/" + url.PathEscape(ref), optionalBody: true}, &out)
	return out, err
}

// CollectTemplates runs the template garbage collector now
// (POST /v1/admin/templates/gc; admin keys only).
func (c *Client) CollectTemplates(ctx context.Context) (apiv1.TemplateGCResult, error) {
	var out apiv1.TemplateGCResult
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/admin/templates/gc"}, &out)
	return out, err
}
