package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

const e2bBuildColumns = `id, project_id, template_id, name, tags, files, status, reason, native_build, node_id, created_at, updated_at`

func scanE2BBuild(row interface{ Scan(...any) error }) (model.E2BBuild, error) {
	var (
		b                                                           model.E2BBuild
		id, project, tplID, name, tags, files, status, native, node string
		created, updated                                            int64
	)
	if err := row.Scan(&id, &project, &tplID, &name, &tags, &files, &status, &b.Reason, &native, &node, &created, &updated); err != nil {
		return model.E2BBuild{}, err
	}
	c := columns{row: "e2b build " + id}
	var err error
	if b.ID, err = model.ParseE2BBuildID(id); err != nil {
		c.fail("id", id, err)
	}
	b.ProjectID = c.projectID("project_id", project)
	b.TemplateID = c.templateName("template_id", tplID)
	b.Name = c.taggedName("name", name)
	var rawTags []string
	if err := json.Unmarshal([]byte(tags), &rawTags); err != nil {
		c.fail("tags", tags, err)
	}
	for _, t := range rawTags {
		b.Tags = append(b.Tags, c.templateTag("tags", t))
	}
	if err := json.Unmarshal([]byte(files), &b.Files); err != nil {
		c.fail("files", files, err)
	}
	if len(b.Files) == 0 {
		b.Files = nil
	}
	if b.Status, err = model.ParseE2BBuildStatus(status); err != nil {
		c.fail("status", status, err)
	}
	if native != "" {
		if b.Native, err = model.ParseBuildID(native); err != nil {
			c.fail("native_build", native, err)
		}
	}
	b.Node = c.nodeID("node_id", node)
	if c.err != nil {
		return model.E2BBuild{}, c.err
	}
	b.CreatedAt, b.UpdatedAt = fromMicro(created), fromMicro(updated)
	return b, nil
}

// jsonList is a list as its JSON array (never null).
func jsonList[T any](v []T) string {
	if len(v) == 0 {
		return "[]"
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// CreateE2BBuild implements store.Store.
func (s *Store) CreateE2BBuild(ctx context.Context, b model.E2BBuild) error {
	if _, err := model.ParseE2BBuildID(string(b.ID)); err != nil {
		return fmt.Errorf("create e2b build: %w", err)
	}
	if b.Status != model.E2BBuildWaiting || b.Native != "" || b.Node != "" {
		return fmt.Errorf("create e2b build %s: %w: a new build is waiting, with no native build or node", b.ID, model.ErrInvalid)
	}
	if len(b.Tags) > model.MaxE2BBuildTags {
		return fmt.Errorf("create e2b build %s: %w: more than %d tags", b.ID, model.ErrInvalid, model.MaxE2BBuildTags)
	}
	_, err := s.exec(ctx, `INSERT INTO e2b_builds (`+e2bBuildColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, '', '', '', ?, ?)`,
		string(b.ID), string(b.ProjectID), string(b.TemplateID), b.Name.String(), jsonList(b.Tags), jsonList(b.Files),
		string(b.Status), micro(b.CreatedAt), micro(b.CreatedAt))
	if err != nil {
		return fmt.Errorf("create e2b build %s: %w", b.ID, s.insertErr(err))
	}
	return nil
}

// GetE2BBuild implements store.Store.
func (s *Store) GetE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID) (model.E2BBuild, error) {
	b, err := scanE2BBuild(s.queryRow(ctx, `SELECT `+e2bBuildColumns+` FROM e2b_builds WHERE id = ? AND project_id = ?`,
		string(id), string(project)))
	if err != nil {
		return model.E2BBuild{}, fmt.Errorf("get e2b build %s: %w", id, errNotFound(err))
	}
	return b, nil
}

// setE2BBuild updates a build of project ("" for any) whose status is one
// of from: set is the SET clause after status; ErrNotFound if there is no
// such build, ErrStateChanged if its status is not one of from.
func (s *Store) setE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID, from []model.E2BBuildStatus, to model.E2BBuildStatus, set string, args ...any) error {
	return s.write(ctx, false, func(t tx) error {
		var cur string
		q := `SELECT status FROM e2b_builds WHERE id = ?`
		qargs := []any{string(id)}
		if project != "" {
			q += ` AND project_id = ?`
			qargs = append(qargs, string(project))
		}
		if err := t.queryRow(ctx, q+` `+t.s.d.RowLock, qargs...).Scan(&cur); err != nil {
			return errNotFound(err)
		}
		ok := false
		for _, f := range from {
			ok = ok || cur == string(f)
		}
		if !ok {
			return fmt.Errorf("%w: the build is %s", store.ErrStateChanged, cur)
		}
		res, err := t.exec(ctx, `UPDATE e2b_builds SET status = ?`+set+` WHERE id = ?`,
			append(append([]any{string(to)}, args...), string(id))...)
		if err != nil {
			return err
		}
		return oneRow(res)
	})
}

// StartE2BBuild implements store.Store.
func (s *Store) StartE2BBuild(ctx context.Context, project model.ProjectID, id model.E2BBuildID, node model.NodeID, files []string, now time.Time) (model.E2BBuild, error) {
	if node == "" {
		return model.E2BBuild{}, fmt.Errorf("start e2b build %s: %w: no node", id, model.ErrInvalid)
	}
	err := s.setE2BBuild(ctx, project, id, []model.E2BBuildStatus{model.E2BBuildWaiting}, model.E2BBuildStarting,
		`, node_id = ?, files = ?, updated_at = ?`, string(node), jsonList(files), micro(now))
	if err != nil {
		return model.E2BBuild{}, fmt.Errorf("start e2b build %s: %w", id, err)
	}
	return s.GetE2BBuild(ctx, project, id)
}

// SetE2BBuildNative implements store.Store.
func (s *Store) SetE2BBuildNative(ctx context.Context, id model.E2BBuildID, native model.BuildID, now time.Time) error {
	if _, err := model.ParseBuildID(string(native)); err != nil {
		return fmt.Errorf("set e2b build %s native: %w", id, err)
	}
	err := s.setE2BBuild(ctx, "", id, []model.E2BBuildStatus{model.E2BBuildStarting}, model.E2BBuildBuilding,
		`, native_build = ?, updated_at = ?`, string(native), micro(now))
	if err != nil {
		return fmt.Errorf("set e2b build %s native: %w", id, err)
	}
	return nil
}

// ReplaceE2BBuildNative implements store.Store.
func (s *Store) ReplaceE2BBuildNative(ctx context.Context, id model.E2BBuildID, from, to model.BuildID, now time.Time) error {
	if _, err := model.ParseBuildID(string(to)); err != nil {
		return fmt.Errorf("replace e2b build %s native: %w", id, err)
	}
	err := s.write(ctx, false, func(t tx) error {
		res, err := t.exec(ctx, `UPDATE e2b_builds SET native_build = ?, updated_at = ? WHERE id = ? AND status = ? AND native_build = ?`,
			string(to), micro(now), string(id), string(model.E2BBuildBuilding), string(from))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("%w: the build is not building on %s", store.ErrStateChanged, from)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replace e2b build %s native: %w", id, err)
	}
	return nil
}

// EndE2BBuild implements store.Store.
func (s *Store) EndE2BBuild(ctx context.Context, id model.E2BBuildID, status model.E2BBuildStatus, reason string, now time.Time) error {
	if !status.Ended() {
		return fmt.Errorf("end e2b build %s: %w: %q is not an end", id, model.ErrInvalid, status)
	}
	err := s.setE2BBuild(ctx, "", id, []model.E2BBuildStatus{model.E2BBuildWaiting, model.E2BBuildStarting, model.E2BBuildBuilding}, status,
		`, reason = ?, updated_at = ?`, reason, micro(now))
	if err != nil {
		return fmt.Errorf("end e2b build %s: %w", id, err)
	}
	return nil
}

// FailStartingE2BBuilds implements store.Store.
func (s *Store) FailStartingE2BBuilds(ctx context.Context, node model.NodeID, before time.Time, reason string, now time.Time) (int, error) {
	q := `UPDATE e2b_builds SET status = ?, reason = ?, updated_at = ? WHERE status = ? AND updated_at < ?`
	args := []any{string(model.E2BBuildError), reason, micro(now), string(model.E2BBuildStarting), micro(before)}
	if node != "" {
		q += ` AND node_id = ?`
		args = append(args, string(node))
	}
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("fail starting e2b builds: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// PruneE2BBuilds implements store.Store.
func (s *Store) PruneE2BBuilds(ctx context.Context, before time.Time) (int, error) {
	res, err := s.exec(ctx, `DELETE FROM e2b_builds WHERE updated_at < ?`, micro(before))
	if err != nil {
		return 0, fmt.Errorf("prune e2b builds: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
