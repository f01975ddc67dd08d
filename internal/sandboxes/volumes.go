package sandboxes

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlockdev/airlock/internal/environment"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// VolumeMountRequest is a volume a create asks to mount: the project's
// volume by ID or name, at a guest path (model.ParseVolumePath).
type VolumeMountRequest struct {
	Volume model.VolumeRef
	Path   model.GuestPath
}

// resolveVolumes resolves a create's volume mounts to the project's
// volumes and says which node they bind the sandbox to ("" if none of
// them has a node yet). Volumes run on the OCI runtimes only: an
// environment that is known to be qemu is refused.
func (s *Service) resolveVolumes(ctx context.Context, req CreateRequest, sel environment.Selector) ([]model.VolumeMount, model.NodeID, error) {
	if len(req.Volumes) == 0 {
		return nil, "", nil
	}
	if s.cfg.Placer == nil {
		return nil, "", errorf(NotSupported, "this server does not place sandboxes on nodes: volume mounts are not supported")
	}
	name, err := s.environmentName(ctx, sel)
	if err != nil {
		return nil, "", err
	}
	if name == environment.NameQEMU {
		return nil, "", errorf(NotSupported, "volume mounts are not supported in the qemu environment (runc, crun and runsc mount volumes)")
	}
	var (
		out  = make([]model.VolumeMount, len(req.Volumes))
		node model.NodeID
	)
	for i, m := range req.Volumes {
		v, err := s.cfg.Store.GetVolume(ctx, req.Project, m.Volume)
		if errors.Is(err, store.ErrNotFound) {
			return nil, "", errorf(VolumeNotFound, "volume %s not found", m.Volume)
		} else if err != nil {
			return nil, "", fmt.Errorf("volume %s: %w", m.Volume, err)
		}
		if v.NodeID != "" {
			if node != "" && node != v.NodeID {
				return nil, "", errorf(VolumeConflict, "the volumes live on different nodes (%s on %s, another on %s): a sandbox mounts volumes of one node", v.Name, v.NodeID, node)
			}
			node = v.NodeID
		}
		out[i] = model.VolumeMount{Volume: v.ID, Path: m.Path, SizeMiB: v.SizeMiB}
	}
	if err := model.CheckVolumeMountPaths(out); err != nil {
		return nil, "", err
	}
	return out, node, nil
}

// environmentName is the name of the environment sel names: its Name, or
// the recorded definition's of its reference ("" if not known).
func (s *Service) environmentName(ctx context.Context, sel environment.Selector) (environment.Name, error) {
	if sel.Ref == "" {
		return sel.Name, nil
	}
	rec, err := s.cfg.Store.GetEnvironment(ctx, sel.Ref)
	switch {
	case err == nil:
		return rec.Name, nil
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	}
	return "", fmt.Errorf("read environment %s: %w", sel.Ref, err)
}

// volumeError maps the store's refusals of a create's volumes.
func volumeError(err error) error {
	switch {
	case errors.Is(err, store.ErrVolumeNotFound):
		return errorf(VolumeNotFound, "a volume to mount was deleted meanwhile: %v", err)
	case errors.Is(err, store.ErrVolumeElsewhere):
		return errorf(VolumeConflict, "a volume to mount was bound to another node meanwhile; retry: %v", err)
	}
	return err
}
