package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
)

// Quotas are four nullable columns of projects (NULL: unlimited). A
// sandbox counts towards them in every state but deleted.

// usageColumns sums the live sandboxes of the project whose id is the
// query's next argument. 'deleted' is a literal so that PostgreSQL can use
// the partial index sandboxes_project_live.
const usageColumns = `COUNT(*), COALESCE(SUM(cpus), 0), COALESCE(SUM(memory_mib), 0), COALESCE(SUM(disk_mib), 0)
	FROM sandboxes WHERE project_id = ? AND state <> 'deleted'`

// nullLimits scans the four quota columns.
type nullLimits [4]sql.NullInt64

func (n *nullLimits) dest() []any { return []any{&n[0], &n[1], &n[2], &n[3]} }

func (n *nullLimits) quota(project model.ProjectID) (model.Quota, error) {
	var p [4]*int64
	for i := range n {
		if n[i].Valid {
			v := n[i].Int64
			p[i] = &v
		}
	}
	q, err := model.ParseQuota(p[0], p[1], p[2], p[3])
	if err != nil {
		return model.Quota{}, fmt.Errorf("stored quota of project %s: %w", project, err)
	}
	return q, nil
}

// admit locks the project's row (serializing the creates of one project on
// PostgreSQL; SQLite's write transactions are serial anyway) and checks
// that one more sandbox of resources r fits its quota. An unknown project
// is store.ErrNotFound.
func (t tx) admit(ctx context.Context, project model.ProjectID, r model.Resources) error {
	var lim nullLimits
	err := t.queryRow(ctx, `SELECT quota_sandboxes, quota_cpus, quota_memory_mib, quota_disk_mib
		FROM projects WHERE id = ? `+t.s.d.QuotaLock, string(project)).Scan(lim.dest()...)
	if err != nil {
		return fmt.Errorf("read quota of project %s: %w", project, errNotFound(err))
	}
	q, err := lim.quota(project)
	if err != nil {
		return err
	}
	if q.Unlimited() {
		return nil
	}
	var u model.Usage
	if err := t.queryRow(ctx, `SELECT `+usageColumns, string(project)).
		Scan(&u.Sandboxes, &u.CPUs, &u.MemoryMiB, &u.DiskMiB); err != nil {
		return fmt.Errorf("sum the live sandboxes of project %s: %w", project, err)
	}
	return q.Admit(u, r)
}

// SetProjectQuota implements store.Store.
func (s *Store) SetProjectQuota(ctx context.Context, project model.ProjectID, q model.Quota) error {
	err := s.write(ctx, false, func(t tx) error {
		res, err := t.exec(ctx, `UPDATE projects SET quota_sandboxes = ?, quota_cpus = ?, quota_memory_mib = ?, quota_disk_mib = ?
			WHERE id = ?`, q.Sandboxes.Ptr(), q.CPUs.Ptr(), q.MemoryMiB.Ptr(), q.DiskMiB.Ptr(), string(project))
		if err != nil {
			return err
		}
		return oneRow(res)
	})
	if err != nil {
		return fmt.Errorf("set quota of project %s: %w", project, err)
	}
	return nil
}

// GetProjectQuota implements store.Store: one statement, so the quota and
// the usage come from one snapshot.
func (s *Store) GetProjectQuota(ctx context.Context, project model.ProjectID) (model.Quota, model.Usage, error) {
	var (
		lim nullLimits
		u   model.Usage
	)
	dest := append(lim.dest(), &u.Sandboxes, &u.CPUs, &u.MemoryMiB, &u.DiskMiB)
	err := s.queryRow(ctx, `SELECT p.quota_sandboxes, p.quota_cpus, p.quota_memory_mib, p.quota_disk_mib,
		u.* FROM projects p, (SELECT `+usageColumns+`) u WHERE p.id = ?`, string(project), string(project)).Scan(dest...)
	if err != nil {
		return model.Quota{}, model.Usage{}, fmt.Errorf("get quota of project %s: %w", project, errNotFound(err))
	}
	q, err := lim.quota(project)
	if err != nil {
		return model.Quota{}, model.Usage{}, err
	}
	return q, u, nil
}
