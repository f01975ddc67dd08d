-- 019_volumes: persistent volumes of a project, mounted into sandboxes.
--
-- volumes: one row per live volume (a delete removes the row; the node
-- that holds its data removes its files). name is unique per project.
-- node_id is the node that holds its data: '' until a sandbox (or a write
-- of its content) first uses it, which binds it there for good.
-- sandbox_volumes: which volumes a sandbox mounts where, so that a volume
-- mounted by a sandbox that is not deleted cannot be deleted (the
-- sandbox's own copy, with each volume's size, is sandboxes.volume_mounts,
-- a JSON array read with the sandbox). A purge of deleted sandboxes
-- removes their rows.

CREATE TABLE volumes (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id),
    name       TEXT NOT NULL,
    size_mib   BIGINT NOT NULL,
    node_id    TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    UNIQUE (project_id, name)
);
CREATE INDEX volumes_node ON volumes (node_id);

CREATE TABLE sandbox_volumes (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    volume_id  TEXT NOT NULL,
    path       TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, volume_id)
);
CREATE INDEX sandbox_volumes_volume ON sandbox_volumes (volume_id, sandbox_id);

ALTER TABLE sandboxes ADD COLUMN volume_mounts TEXT NOT NULL DEFAULT '[]';
