-- 020_snapshots: saved snapshots of running sandboxes, a noun of their own.
--
-- A snapshot row is made with its snapshot operation (state creating) and
-- is written by the node that holds its files (node_id) once the
-- operation succeeded (ready: kind, format, location and size set) or
-- failed (failed, with error). A delete moves it to deleting; the node
-- removes its files once no sandbox is being created from it, then the
-- row. template_digest, the resources, env and egress are what a sandbox
-- made from it gets (its source's). fork is 1 for the snapshot of a fork
-- (POST /v1/sandboxes/{id}/fork): not listed, deleted once its sandboxes
-- are made.
--
-- sandboxes.from_snapshot names the snapshot a sandbox was created from
-- ('' for none).

CREATE TABLE snapshots (
    id               TEXT    NOT NULL PRIMARY KEY,
    project_id       TEXT    NOT NULL REFERENCES projects (id),
    source_sandbox   TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    error            TEXT    NOT NULL,
    node_id          TEXT    NOT NULL,
    environment      TEXT    NOT NULL,
    runtime          TEXT    NOT NULL,
    template_digest  TEXT    NOT NULL,
    cpus             INTEGER NOT NULL,
    memory_mib       INTEGER NOT NULL,
    disk_mib         INTEGER NOT NULL,
    host_pids        INTEGER NOT NULL,
    env              TEXT    NOT NULL,
    egress           TEXT    NOT NULL,
    operation_id     TEXT    NOT NULL,
    fork             INTEGER NOT NULL,
    kind             TEXT    NOT NULL,
    format           TEXT    NOT NULL,
    location         TEXT    NOT NULL,
    size_bytes       BIGINT  NOT NULL,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL
);
CREATE INDEX snapshots_project ON snapshots (project_id, created_at, id);
CREATE INDEX snapshots_node ON snapshots (node_id, state);
CREATE INDEX snapshots_operation ON snapshots (operation_id);

ALTER TABLE sandboxes ADD COLUMN from_snapshot TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_from_snapshot ON sandboxes (from_snapshot, state);
