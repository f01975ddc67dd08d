package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const volumeColumns = `v.id, v.project_id, v.name, v.size_mib, v.node_id, v.created_at`

func scanVolume(row interface{ Scan(...any) error }) (model.Volume, error) {
	var (
		v                       model.Volume
		id, project, name, node string
		size, created           int64
	)
	if err := row.Scan(&id, &project, &name, &size, &node, &created); err != nil {
		return model.Volume{}, err
	}
	c := columns{row: "volume " + id}
	var err error
	if v.ID, err = model.ParseVolumeID(id); err != nil {
		c.fail("id", id, err)
	}
	v.ProjectID = c.projectID("project_id", project)
	if v.Name, err = model.ParseVolumeName(name); err != nil {
		c.fail("name", name, err)
	}
	if v.SizeMiB, err = model.ParseVolumeSize(size); err != nil {
		c.fail("size_mib", fmt.Sprint(size), err)
	}
	if node != "" {
		v.NodeID = c.nodeID("node_id", node)
	}
	if c.err != nil {
		return model.Volume{}, c.err
	}
	v.CreatedAt = fromMicro(created)
	return v, nil
}

// CreateVolume implements store.Store.
func (s *Store) CreateVolume(ctx context.Context, v model.Volume, maxTotalMiB int64, idem *store.IdempotencyRecord) error {
	if _, err := model.ParseVolumeID(string(v.ID)); err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	if _, err := model.ParseVolumeName(string(v.Name)); err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	if _, err := model.ParseVolumeSize(int64(v.SizeMiB)); err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	if v.NodeID != "" {
		return fmt.Errorf("create volume %s: %w: a new volume has no node", v.ID, model.ErrInvalid)
	}
	err := s.write(ctx, false, func(t tx) error {
		// The project's row lock serializes the volume creates of one
		// project (as admit does its sandboxes'): the sum read below
		// cannot change before the insert commits.
		var one int
		if err := t.queryRow(ctx, `SELECT 1 FROM projects WHERE id = ? `+t.s.d.QuotaLock, string(v.ProjectID)).Scan(&one); err != nil {
			return fmt.Errorf("project %s: %w", v.ProjectID, errNotFound(err))
		}
		if err := t.insertIdempotency(ctx, idem); err != nil {
			return err
		}
		if maxTotalMiB > 0 {
			var used int64
			if err := t.queryRow(ctx, `SELECT COALESCE(SUM(size_mib), 0) FROM volumes WHERE project_id = ?`,
				string(v.ProjectID)).Scan(&used); err != nil {
				return fmt.Errorf("sum the project's volumes: %w", err)
			}
			if used+int64(v.SizeMiB) > maxTotalMiB {
				return &model.QuotaExceededError{Limit: model.VolumeQuotaLimit, Max: maxTotalMiB, Used: used, Requested: int64(v.SizeMiB)}
			}
		}
		_, err := t.exec(ctx, `INSERT INTO volumes (id, project_id, name, size_mib, node_id, created_at) VALUES (?, ?, ?, ?, '', ?)`,
			string(v.ID), string(v.ProjectID), string(v.Name), v.SizeMiB, micro(v.CreatedAt))
		return s.insertErr(err)
	})
	if err != nil {
		return fmt.Errorf("create volume %s (%s): %w", v.ID, v.Name, err)
	}
	return nil
}

// GetVolume implements store.Store.
func (s *Store) GetVolume(ctx context.Context, project model.ProjectID, ref model.VolumeRef) (model.Volume, error) {
	col, key := "id", string(ref.ID)
	if ref.ID == "" {
		col, key = "name", string(ref.Name)
	}
	v, err := scanVolume(s.queryRow(ctx, `SELECT `+volumeColumns+` FROM volumes v WHERE v.project_id = ? AND v.`+col+` = ?`,
		string(project), key))
	if err != nil {
		return model.Volume{}, fmt.Errorf("get volume %s: %w", ref, errNotFound(err))
	}
	return v, nil
}

// GetVolumeByID implements store.Store.
func (s *Store) GetVolumeByID(ctx context.Context, id model.VolumeID) (model.Volume, error) {
	v, err := scanVolume(s.queryRow(ctx, `SELECT `+volumeColumns+` FROM volumes v WHERE v.id = ?`, string(id)))
	if err != nil {
		return model.Volume{}, fmt.Errorf("get volume %s: %w", id, errNotFound(err))
	}
	return v, nil
}

// ListVolumes implements store.Store.
func (s *Store) ListVolumes(ctx context.Context, project model.ProjectID) ([]model.Volume, error) {
	rows, err := s.query(ctx, `SELECT `+volumeColumns+` FROM volumes v WHERE v.project_id = ? ORDER BY v.name`, string(project))
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	out := []model.Volume{}
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// volumeUsersQuery lists the sandboxes not deleted that mount the volume
// given as its argument.
const volumeUsersQuery = `SELECT sv.sandbox_id FROM sandbox_volumes sv JOIN sandboxes s ON s.id = sv.sandbox_id
	WHERE sv.volume_id = ? AND s.state <> 'deleted' ORDER BY sv.sandbox_id`

// VolumeUsers implements store.Store.
func (s *Store) VolumeUsers(ctx context.Context, id model.VolumeID) ([]model.SandboxID, error) {
	rows, err := s.query(ctx, volumeUsersQuery, string(id))
	if err != nil {
		return nil, fmt.Errorf("users of volume %s: %w", id, err)
	}
	return scanSandboxIDs(rows)
}

func scanSandboxIDs(rows *sql.Rows) ([]model.SandboxID, error) {
	defer rows.Close()
	var out []model.SandboxID
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		c := columns{row: "sandbox_volumes"}
		id := c.sandboxID("sandbox_id", raw)
		if c.err != nil {
			return nil, c.err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// DeleteVolume implements store.Store.
func (s *Store) DeleteVolume(ctx context.Context, project model.ProjectID, id model.VolumeID) (model.Volume, error) {
	var v model.Volume
	err := s.write(ctx, false, func(t tx) error {
		var err error
		v, err = scanVolume(t.queryRow(ctx, `SELECT `+volumeColumns+` FROM volumes v WHERE v.id = ? AND v.project_id = ? `+t.s.d.RowLock,
			string(id), string(project)))
		if err != nil {
			return errNotFound(err)
		}
		rows, err := t.tx.QueryContext(ctx, t.s.q(volumeUsersQuery), string(id))
		if err != nil {
			return err
		}
		users, err := scanSandboxIDs(rows)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			names := make([]string, len(users))
			for i, u := range users {
				names[i] = string(u)
			}
			return fmt.Errorf("%w: mounted by sandboxes that are not deleted: %s", store.ErrInUse, strings.Join(names, ", "))
		}
		_, err = t.exec(ctx, `DELETE FROM volumes WHERE id = ?`, string(id))
		return err
	})
	if err != nil {
		return model.Volume{}, fmt.Errorf("delete volume %s: %w", id, err)
	}
	return v, nil
}

// BindVolumeNode implements store.Store.
func (s *Store) BindVolumeNode(ctx context.Context, project model.ProjectID, id model.VolumeID, node model.NodeID) (model.Volume, error) {
	var v model.Volume
	err := s.write(ctx, false, func(t tx) error {
		var err error
		v, err = t.bindVolume(ctx, project, id, node)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrVolumeElsewhere) {
		return model.Volume{}, fmt.Errorf("bind volume %s to node %s: %w", id, node, err)
	}
	return v, nil
}

// bindVolume locks the project's volume id and binds it to node if it has
// none; it returns the volume with its node, and with it
// store.ErrVolumeElsewhere if that is another.
func (t tx) bindVolume(ctx context.Context, project model.ProjectID, id model.VolumeID, node model.NodeID) (model.Volume, error) {
	v, err := scanVolume(t.queryRow(ctx, `SELECT `+volumeColumns+` FROM volumes v WHERE v.id = ? AND v.project_id = ? `+t.s.d.RowLock,
		string(id), string(project)))
	if errors.Is(err, sql.ErrNoRows) {
		return model.Volume{}, fmt.Errorf("%w %s", store.ErrVolumeNotFound, id)
	} else if err != nil {
		return model.Volume{}, err
	}
	switch v.NodeID {
	case node:
		return v, nil
	case "":
		if _, err := t.exec(ctx, `UPDATE volumes SET node_id = ? WHERE id = ?`, string(node), string(id)); err != nil {
			return model.Volume{}, err
		}
		v.NodeID = node
		return v, nil
	}
	return v, fmt.Errorf("%w: volume %s is on node %s", store.ErrVolumeElsewhere, id, v.NodeID)
}

// mountVolumes checks and records the volumes a new sandbox mounts, in
// its create's transaction (see store.Store's CreateSandbox).
func (t tx) mountVolumes(ctx context.Context, sb model.Sandbox) error {
	if len(sb.VolumeMounts) == 0 {
		return nil
	}
	if sb.NodeID == "" {
		return fmt.Errorf("%w: a sandbox that mounts volumes must be placed when it is created", model.ErrInvalid)
	}
	if err := model.CheckVolumeMountPaths(sb.VolumeMounts); err != nil {
		return err
	}
	for _, m := range sb.VolumeMounts {
		v, err := t.bindVolume(ctx, sb.ProjectID, m.Volume, sb.NodeID)
		if err != nil {
			return err
		}
		if v.SizeMiB != m.SizeMiB {
			return fmt.Errorf("%w: volume %s has %d MiB, the mount says %d", model.ErrInvalid, m.Volume, v.SizeMiB, m.SizeMiB)
		}
		if _, err := t.exec(ctx, `INSERT INTO sandbox_volumes (sandbox_id, volume_id, path) VALUES (?, ?, ?)`,
			string(sb.ID), string(m.Volume), string(m.Path)); err != nil {
			return fmt.Errorf("insert volume mount %s: %w", m.Volume, err)
		}
	}
	return nil
}

// encodeVolumeMounts is the sandboxes.volume_mounts column of mounts.
func encodeVolumeMounts(mounts []model.VolumeMount) (string, error) {
	if len(mounts) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(mounts)
	return string(b), err
}

// decodeVolumeMounts parses the sandboxes.volume_mounts column.
func decodeVolumeMounts(raw string) ([]model.VolumeMount, error) {
	var in []struct {
		Volume  string `json:"volume"`
		Path    string `json:"path"`
		SizeMiB int64  `json:"size_mib"`
	}
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]model.VolumeMount, len(in))
	for i, m := range in {
		id, err := model.ParseVolumeID(m.Volume)
		if err != nil {
			return nil, err
		}
		p, err := model.ParseVolumePath(m.Path)
		if err != nil {
			return nil, err
		}
		size, err := model.ParseVolumeSize(m.SizeMiB)
		if err != nil {
			return nil, err
		}
		out[i] = model.VolumeMount{Volume: id, Path: p, SizeMiB: size}
	}
	return out, nil
}
