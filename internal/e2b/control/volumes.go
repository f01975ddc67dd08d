package control

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/client"
	"github.com/airlockdev/airlock/internal/model"
)

// defaultVolumeMiB is the size of a volume made through E2B's API, whose
// create names none: 1 GiB (the native API takes any size).
const defaultVolumeMiB = 1024

// E2B's volume wire types.
type (
	newVolumeIn struct {
		Name string `json:"name"`
	}
	volumeOut struct {
		VolumeID string `json:"volumeID"`
		Name     string `json:"name"`
	}
	// volumeAndTokenOut: token authenticates E2B's volume content API
	// (/volumecontent): the native volume content token.
	volumeAndTokenOut struct {
		VolumeID string `json:"volumeID"`
		Name     string `json:"name"`
		Token    string `json:"token"`
	}
	volumeMountIn struct {
		Name string `json:"name"`
		Path string `json:"path"`
	}
)

// createVolume: POST /volumes {name} → 201 VolumeAndToken, a native volume
// of defaultVolumeMiB.
func (h *Handler) createVolume(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var in newVolumeIn
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	if _, err := model.ParseVolumeName(in.Name); err != nil {
		return badRequest("name: %v", err)
	}
	v, err := c.CreateVolume(ctx, apiv1.CreateVolumeRequest{Name: in.Name, SizeMiB: defaultVolumeMiB})
	if err != nil {
		return err
	}
	return h.writeVolumeAndToken(ctx, w, http.StatusCreated, v)
}

// listVolumes: GET /volumes → 200 [Volume].
func (h *Handler) listVolumes(ctx context.Context, w http.ResponseWriter, _ *http.Request, c *client.Client) error {
	l, err := c.ListVolumes(ctx)
	if err != nil {
		return err
	}
	out := make([]volumeOut, 0, len(l.Volumes))
	for _, v := range l.Volumes {
		out = append(out, volumeOut{VolumeID: v.ID, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// volumeID is the {id} of a volume route: an Airlock volume ID (a name or
// a malformed ID is a 404, as for an unknown volume: E2B addresses volumes
// by ID).
func volumeID(r *http.Request) (model.VolumeID, error) {
	id, err := model.ParseVolumeID(r.PathValue("id"))
	if err != nil {
		return "", &httpError{status: http.StatusNotFound, msg: "volume " + r.PathValue("id") + " not found"}
	}
	return id, nil
}

// getVolume: GET /volumes/{id} → 200 VolumeAndToken.
func (h *Handler) getVolume(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := volumeID(r)
	if err != nil {
		return err
	}
	v, err := c.GetVolume(ctx, model.VolumeRef{ID: id})
	if err != nil {
		return err
	}
	return h.writeVolumeAndToken(ctx, w, http.StatusOK, v)
}

// writeVolumeAndToken answers a volume with its content token.
func (h *Handler) writeVolumeAndToken(ctx context.Context, w http.ResponseWriter, status int, v apiv1.Volume) error {
	out := volumeAndTokenOut{VolumeID: v.ID, Name: v.Name}
	if h.cfg.VolumeToken != nil {
		tok, err := h.cfg.VolumeToken(ctx, v)
		if err != nil {
			return err
		}
		out.Token = tok
	}
	writeJSON(w, status, out)
	return nil
}

// deleteVolume: DELETE /volumes/{id} → 204; 409 while a sandbox that is
// not deleted mounts it.
func (h *Handler) deleteVolume(ctx context.Context, w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id, err := volumeID(r)
	if err != nil {
		return err
	}
	if _, err := c.DeleteVolume(ctx, model.VolumeRef{ID: id}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseVolumeMounts turns E2B's volumeMounts ([{name, path}]) into the
// native create's volume_mounts; the native API checks the volumes and
// the paths again.
func parseVolumeMounts(raw json.RawMessage) ([]apiv1.VolumeMountRequest, error) {
	if !present(raw) {
		return nil, nil
	}
	var in []volumeMountIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, badRequest("volumeMounts: %v", err)
	}
	out := make([]apiv1.VolumeMountRequest, 0, len(in))
	for i, m := range in {
		if _, err := model.ParseVolumeRef(m.Name); err != nil {
			return nil, badRequest("volumeMounts[%d].name: %v", i, err)
		}
		if _, err := model.ParseVolumePath(m.Path); err != nil {
			return nil, badRequest("volumeMounts[%d].path: %v", i, err)
		}
		out = append(out, apiv1.VolumeMountRequest{Volume: m.Name, Path: m.Path})
	}
	return out, nil
}

// volumeMountsOut is E2B's volumeMounts of a sandbox: its volumes by name
// (the native sandbox names them by ID; a volume deleted since shows its
// ID).
func volumeMountsOut(ctx context.Context, c *client.Client, sb apiv1.Sandbox) ([]volumeMountIn, error) {
	out := make([]volumeMountIn, 0, len(sb.VolumeMounts))
	if len(sb.VolumeMounts) == 0 {
		return out, nil
	}
	l, err := c.ListVolumes(ctx)
	if err != nil {
		return nil, err
	}
	names := make(map[string]string, len(l.Volumes))
	for _, v := range l.Volumes {
		names[v.ID] = v.Name
	}
	for _, m := range sb.VolumeMounts {
		name := names[m.Volume]
		if name == "" {
			name = m.Volume
		}
		out = append(out, volumeMountIn{Name: name, Path: m.Path})
	}
	return out, nil
}
