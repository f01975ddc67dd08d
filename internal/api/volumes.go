package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/sandboxes"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/volumefs"
)

// VolumeHost is this node's volume storage (internal/volumedisk): the API
// removes a deleted volume's files at once when this node holds them (the
// node's reconciler removes them otherwise) and reports a mounted
// volume's usage.
type VolumeHost interface {
	Remove(ctx context.Context, id model.VolumeID) error
	Usage(id model.VolumeID) (used, total int64, ok bool, err error)
	// Content mounts the volume (an image of sizeMiB the first time)
	// unless it is mounted and opens its files for the content API
	// (volumefiles.go), until release.
	Content(ctx context.Context, id model.VolumeID, sizeMiB int) (root *volumefs.Root, release func(), err error)
}

// DefaultVolumeQuotaMiB is the per-project total of volume sizes when the
// server sets none (--volume-quota-mib): 100 GiB.
const DefaultVolumeQuotaMiB = 100 * 1024

func volumeOut(v model.Volume) apiv1.Volume {
	return apiv1.Volume{ID: v.ID.String(), Name: v.Name.String(), SizeMiB: v.SizeMiB, NodeID: string(v.NodeID), CreatedAt: v.CreatedAt.UTC()}
}

// parseVolumeMounts parses a create's volume_mounts.
func parseVolumeMounts(in []apiv1.VolumeMountRequest) ([]sandboxes.VolumeMountRequest, error) {
	if len(in) > model.MaxVolumeMounts {
		return nil, badRequest("volume_mounts: at most %d", model.MaxVolumeMounts)
	}
	var out []sandboxes.VolumeMountRequest
	for i, m := range in {
		ref, err := model.ParseVolumeRef(m.Volume)
		if err != nil {
			return nil, fmt.Errorf("volume_mounts[%d].volume: %w", i, err)
		}
		p, err := model.ParseVolumePath(m.Path)
		if err != nil {
			return nil, fmt.Errorf("volume_mounts[%d].path: %w", i, err)
		}
		out = append(out, sandboxes.VolumeMountRequest{Volume: ref, Path: p})
	}
	return out, nil
}

// volumeRef parses the {id} of a volume route: its ID or its name.
func volumeRef(r *http.Request) (model.VolumeRef, error) {
	return model.ParseVolumeRef(r.PathValue("id"))
}

func (a *API) getVolumeOf(ctx context.Context, project model.ProjectID, ref model.VolumeRef) (model.Volume, error) {
	v, err := a.cfg.Store.GetVolume(ctx, project, ref)
	if errors.Is(err, store.ErrNotFound) {
		return model.Volume{}, errorf(apiv1.CodeVolumeNotFound, "volume %s not found", ref)
	}
	return v, err
}

// createVolume: POST /v1/volumes → 201 Volume.
func (a *API) createVolume(ctx context.Context, c *call[apiv1.CreateVolumeRequest]) (*reply, error) {
	name, err := model.ParseVolumeName(c.in.Name)
	if err != nil {
		return nil, err
	}
	size, err := model.ParseVolumeSize(c.in.SizeMiB)
	if err != nil {
		return nil, err
	}
	v := model.Volume{ID: model.NewVolumeID(), ProjectID: c.p.project, Name: name, SizeMiB: size, CreatedAt: c.now}
	quota := a.cfg.VolumeQuotaMiB
	if quota == 0 {
		quota = DefaultVolumeQuotaMiB
	}
	// The answer is encoded before the store call so that the idempotency
	// record is written in the volume's transaction.
	rep, idem, err := c.reply(http.StatusCreated, volumeOut(v))
	if err != nil {
		return nil, err
	}
	err = a.cfg.Store.CreateVolume(ctx, v, max(quota, 0), idem)
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, errorf(apiv1.CodeAlreadyExists, "the project has a volume named %s already", name)
	} else if err != nil {
		return nil, err
	}
	a.log.InfoContext(ctx, "volume created", "volume", v.ID, "name", name, "size_mib", size, "project", c.p.project, "by", c.p.keyID)
	c.created(v.ID.String())
	return rep, nil
}

// listVolumes: GET /v1/volumes → 200 VolumeList.
func (a *API) listVolumes(w http.ResponseWriter, r *http.Request, p principal) {
	list, err := a.cfg.Store.ListVolumes(r.Context(), p.project)
	if err != nil {
		a.writeError(w, r, fmt.Errorf("list volumes: %w", err))
		return
	}
	out := apiv1.VolumeList{Volumes: make([]apiv1.Volume, 0, len(list))}
	for _, v := range list {
		out.Volumes = append(out.Volumes, volumeOut(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// requestedVolume is the volume {id} (its ID or name) of the caller's
// project; another project's is volume_not_found.
func (a *API) requestedVolume(r *http.Request, p principal) (model.Volume, error) {
	ref, err := volumeRef(r)
	if err != nil {
		return model.Volume{}, err
	}
	return a.getVolumeOf(r.Context(), p.project, ref)
}

// getVolume: GET /v1/volumes/{id} → 200 Volume ({id}: its ID or name),
// with the sandboxes that mount it and, on the node that holds it, its
// usage.
func (a *API) getVolume(w http.ResponseWriter, r *http.Request, p principal) {
	ctx := r.Context()
	v, err := a.requestedVolume(r, p)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := volumeOut(v)
	users, err := a.cfg.Store.VolumeUsers(ctx, v.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	for _, u := range users {
		out.MountedBy = append(out.MountedBy, u.String())
	}
	if a.cfg.Volumes != nil && v.NodeID != "" && v.NodeID == a.cfg.Self {
		if used, _, ok, err := a.cfg.Volumes.Usage(v.ID); err == nil && ok {
			out.UsedBytes = &used
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteVolume: DELETE /v1/volumes/{id} → 200 the deleted Volume; 409
// volume_in_use while a sandbox that is not deleted mounts it. Its files
// go at once when this node holds them, else with the reconciler of the
// node that does.
func (a *API) deleteVolume(ctx context.Context, c *call[noBody]) (*reply, error) {
	ref, err := volumeRef(c.r)
	if err != nil {
		return nil, err
	}
	v, err := a.getVolumeOf(ctx, c.p.project, ref)
	if err != nil {
		return nil, err
	}
	v, err = a.cfg.Store.DeleteVolume(ctx, c.p.project, v.ID)
	switch {
	case errors.Is(err, store.ErrInUse):
		return nil, errorf(apiv1.CodeVolumeInUse, "volume %s: %v; delete them first", ref, errors.Unwrap(err))
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(apiv1.CodeVolumeNotFound, "volume %s not found", ref)
	case err != nil:
		return nil, err
	}
	a.log.InfoContext(ctx, "volume deleted", "volume", v.ID, "name", v.Name, "project", c.p.project, "by", c.p.keyID)
	if a.cfg.Volumes != nil && (v.NodeID == a.cfg.Self || v.NodeID == "") {
		if err := a.cfg.Volumes.Remove(context.WithoutCancel(ctx), v.ID); err != nil {
			// The row is gone: the reconciler removes the files later.
			a.log.WarnContext(ctx, "remove a deleted volume's files", "volume", v.ID, "err", err)
		}
	}
	return idempotentReply(ctx, a, c, http.StatusOK, volumeOut(v))
}
