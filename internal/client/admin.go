package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// ListTemplates returns the imported templates (GET /v1/templates).
func (c *Client) ListTemplates(ctx context.Context) (apiv1.TemplateList, error) {
	var out apiv1.TemplateList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/templates"}, &out)
	return out, err
}

// ImportTemplate starts a template import (a directory or tar archive on
// the server host, or an OCI image reference) or a recipe build (POST
// /v1/templates; admin keys only) and returns the queued build; follow it
// with FollowBuild.
func (c *Client) ImportTemplate(ctx context.Context, req apiv1.ImportTemplateRequest) (apiv1.Build, error) {
	var out apiv1.Build
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/templates", body: req}, &out)
	return out, err
}

// CreateProject creates a project (POST /v1/admin/projects).
func (c *Client) CreateProject(ctx context.Context, name string) (apiv1.Project, error) {
	var out apiv1.Project
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/admin/projects", body: apiv1.CreateProjectRequest{Name: name}}, &out)
	return out, err
}

// ListProjects returns every project (GET /v1/admin/projects).
func (c *Client) ListProjects(ctx context.Context) (apiv1.ProjectList, error) {
	var out apiv1.ProjectList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/admin/projects"}, &out)
	return out, err
}

// CreateAPIKey creates an API key (POST /v1/admin/keys). The returned key's
// Token is shown only this once.
func (c *Client) CreateAPIKey(ctx context.Context, req apiv1.CreateAPIKeyRequest) (apiv1.APIKey, error) {
	var out apiv1.APIKey
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/admin/keys", body: req}, &out)
	return out, err
}

// ListAPIKeys returns the API keys of one project, or of every project if
// project is empty (GET /v1/admin/keys[?project_id=]).
func (c *Client) ListAPIKeys(ctx context.Context, project model.ProjectID) (apiv1.APIKeyList, error) {
	var out apiv1.APIKeyList
	r := request{method: http.MethodGet, path: "/v1/admin/keys"}
	if project != "" {
		r.query = url.Values{"project_id": {project.String()}}
	}
	err := c.do(ctx, r, &out)
	return out, err
}

// RevokeAPIKey revokes an API key (DELETE /v1/admin/keys/{id}). It returns
// the revoked key as the server shows it, or a zero APIKey if the server
// answered without a body.
func (c *Client) RevokeAPIKey(ctx context.Context, id model.APIKeyID) (apiv1.APIKey, error) {
	var out apiv1.APIKey
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/admin/keys/" + id.String(), optionalBody: true}, &out)
	return out, err
}

// RotateAttachKey makes a new attachment-token signing key active
// (POST /v1/admin/attach-keys/rotate; admin keys only). Tokens signed with
// the previous key keep working until they expire.
func (c *Client) RotateAttachKey(ctx context.Context) (apiv1.AttachKeyList, error) {
	var out apiv1.AttachKeyList
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/admin/attach-keys/rotate"}, &out)
	return out, err
}

// GetProjectQuota returns a project's quota and what its live sandboxes
// hold (GET /v1/admin/projects/{id}/quota; admin keys only).
func (c *Client) GetProjectQuota(ctx context.Context, project model.ProjectID) (apiv1.ProjectQuota, error) {
	var out apiv1.ProjectQuota
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/admin/projects/" + project.String() + "/quota"}, &out)
	return out, err
}

// SetProjectQuota replaces a project's quota; nil limits are unlimited
// (PUT /v1/admin/projects/{id}/quota; admin keys only).
func (c *Client) SetProjectQuota(ctx context.Context, project model.ProjectID, limits apiv1.QuotaLimits) (apiv1.ProjectQuota, error) {
	var out apiv1.ProjectQuota
	err := c.do(ctx, request{method: http.MethodPut, path: "/v1/admin/projects/" + project.String() + "/quota", body: limits}, &out)
	return out, err
}

// ListNodes returns every registered node with its state, capacity, usage
// and heartbeat (GET /v1/admin/nodes; admin keys only).
func (c *Client) ListNodes(ctx context.Context) (apiv1.NodeList, error) {
	var out apiv1.NodeList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/admin/nodes"}, &out)
	return out, err
}

// GetNode returns one node (GET /v1/admin/nodes/{id}; admin keys only).
func (c *Client) GetNode(ctx context.Context, id model.NodeID) (apiv1.Node, error) {
	var out apiv1.Node
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/admin/nodes/" + id.String()}, &out)
	return out, err
}

// CordonNode stops placing new sandboxes on a node; its sandboxes run on
// (POST /v1/admin/nodes/{id}/cordon; admin keys only).
func (c *Client) CordonNode(ctx context.Context, id model.NodeID) (apiv1.Node, error) {
	return c.setNode(ctx, id, "cordon")
}

// UncordonNode makes a cordoned or draining node take new sandboxes again
// (POST /v1/admin/nodes/{id}/uncordon; admin keys only).
func (c *Client) UncordonNode(ctx context.Context, id model.NodeID) (apiv1.Node, error) {
	return c.setNode(ctx, id, "uncordon")
}

// DrainNode stops placing new sandboxes on a node, which is drained once
// its last live sandbox has ended (POST /v1/admin/nodes/{id}/drain; admin
// keys only). Poll GetNode for Drained.
func (c *Client) DrainNode(ctx context.Context, id model.NodeID) (apiv1.Node, error) {
	return c.setNode(ctx, id, "drain")
}

func (c *Client) setNode(ctx context.Context, id model.NodeID, verb string) (apiv1.Node, error) {
	var out apiv1.Node
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/admin/nodes/" + id.String() + "/" + verb}, &out)
	return out, err
}
