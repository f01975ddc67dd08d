-- 026_e2bbuilds: E2B template builds (templates as code) are kept in the
-- store, so that their status and logs answer from any server of a
-- cluster and after a restart (before: the memory of the server asked).
--
-- One row per E2B build ID (a UUID, as E2B's): the project of the key that
-- requested it, the template name (E2B's templateID), the name:tag its
-- native build names and the further tags (JSON array) pointed at the
-- result, the uploaded archives its COPY steps use (JSON array of SHA-256
-- hex), its status (waiting, starting, building, ready, error) with the
-- reason of an error, its native build once queued and the server that
-- started it. A build left starting by a server that stopped is ended in
-- error by the reconcilers (that server's own at its restart; any other's
-- after a grace).

CREATE TABLE e2b_builds (
    id            TEXT   NOT NULL PRIMARY KEY,
    project_id    TEXT   NOT NULL REFERENCES projects (id),
    template_id   TEXT   NOT NULL,
    name          TEXT   NOT NULL,
    tags          TEXT   NOT NULL,
    files         TEXT   NOT NULL,
    status        TEXT   NOT NULL,
    reason        TEXT   NOT NULL,
    native_build  TEXT   NOT NULL,
    node_id       TEXT   NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX e2b_builds_status ON e2b_builds (status, updated_at);
