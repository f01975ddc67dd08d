-- 024_snapshot_names: saved snapshots may have a name (E2B's createSnapshot({name})
-- and listSnapshots({name})): '' for none; not unique within a project.

ALTER TABLE snapshots ADD COLUMN name TEXT NOT NULL DEFAULT '';
CREATE INDEX snapshots_project_name ON snapshots (project_id, name, created_at, id);
