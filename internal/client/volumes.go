package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// CreateVolume creates a volume of the key's project.
func (c *Client) CreateVolume(ctx context.Context, req apiv1.CreateVolumeRequest) (apiv1.Volume, error) {
	var out apiv1.Volume
	err := c.do(ctx, request{method: http.MethodPost, path: "/v1/volumes", body: req}, &out)
	return out, err
}

// ListVolumes lists the project's volumes.
func (c *Client) ListVolumes(ctx context.Context) (apiv1.VolumeList, error) {
	var out apiv1.VolumeList
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/volumes"}, &out)
	return out, err
}

// GetVolume returns a volume of the project by ID or name.
func (c *Client) GetVolume(ctx context.Context, ref model.VolumeRef) (apiv1.Volume, error) {
	var out apiv1.Volume
	err := c.do(ctx, request{method: http.MethodGet, path: "/v1/volumes/" + url.PathEscape(ref.String())}, &out)
	return out, err
}

// DeleteVolume deletes a volume of the project (by ID or name) and its data.
func (c *Client) DeleteVolume(ctx context.Context, ref model.VolumeRef) (apiv1.Volume, error) {
	var out apiv1.Volume
	err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/volumes/" + url.PathEscape(ref.String())}, &out)
	return out, err
}
