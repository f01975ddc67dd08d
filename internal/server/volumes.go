package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/airlockdev/airlock/internal/api"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
	"github.com/airlockdev/airlock/internal/volumedisk"
)

// volumeReconcileInterval is how often a node removes the files of
// volumes deleted through another process (an api replica); a delete
// through this node's own API removes them at once.
const volumeReconcileInterval = time.Minute

// volumeIdle is how long a volume that no sandbox of its node mounts
// stays mounted after the content API's last call on it (or after the
// node first saw it so); volumeIdleInterval is how often a node looks.
const (
	volumeIdle         = 2 * time.Minute
	volumeIdleInterval = 30 * time.Second
)

// openVolumes opens the node's volume storage: SANDBOX_DIR/volumes with
// --sandbox-dir (on the sandboxes' filesystem), else DATA_DIR/volumes.
func openVolumes(dd *dataDir, sandboxDir string, log *slog.Logger) (*volumedisk.Manager, error) {
	dir := filepath.Join(dd.path, "volumes")
	if sandboxDir != "" {
		dir = filepath.Join(sandboxDir, "volumes")
	}
	return volumedisk.New(dir, log)
}

// reconcileVolumes removes what this node holds of volumes that are gone
// from the store or belong to another node (a delete that crashed before
// it removed the files, or one made through another process). A volume
// is never removed while the store has it on this node.
func reconcileVolumes(ctx context.Context, vols *volumedisk.Manager, st store.Store, node model.NodeID, log *slog.Logger) error {
	ids, err := vols.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		v, err := st.GetVolumeByID(ctx, id)
		switch {
		case err == nil && (v.NodeID == node || v.NodeID == ""):
			continue
		case err != nil && !errors.Is(err, store.ErrNotFound):
			errs = append(errs, err)
			continue
		}
		if err := vols.Remove(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		log.InfoContext(ctx, "removed the files of a deleted volume", "volume", id)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reconcile volumes: %w", err)
	}
	return nil
}

// volumeComponents reconcile the node's volumes every
// volumeReconcileInterval.
func volumeComponents(vols *volumedisk.Manager, st store.Store, node model.NodeID, log *slog.Logger) []component {
	if vols == nil {
		return nil
	}
	inUse := func(ctx context.Context, id model.VolumeID) (bool, error) {
		users, err := st.VolumeUsers(ctx, id)
		return len(users) > 0, err
	}
	return []component{loop("volumes", func(ctx context.Context) {
		t := time.NewTicker(volumeReconcileInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := reconcileVolumes(ctx, vols, st, node, log); err != nil && ctx.Err() == nil {
					log.WarnContext(ctx, "volumes", "err", err)
				}
			}
		}
	}), loop("volume-idle", func(ctx context.Context) {
		t := time.NewTicker(volumeIdleInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				if _, err := vols.UnmountIdle(ctx, volumeIdle, now, inUse); err != nil && ctx.Err() == nil {
					log.WarnContext(ctx, "unmount idle volumes", "err", err)
				}
			}
		}
	})}
}

// volumeStorage is the node's volume storage (nil for an api replica).
func (h *host) volumeStorage() *volumedisk.Manager {
	if h == nil {
		return nil
	}
	return h.volumes
}

// volumeHost is volumeStorage for the API (a nil interface, not a typed
// nil, for an api replica).
func (h *host) volumeHost() api.VolumeHost {
	if v := h.volumeStorage(); v != nil {
		return v
	}
	return nil
}
