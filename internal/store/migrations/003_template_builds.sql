-- 003_template_builds: template builds and imports, run in the background by
-- the server's build runner (internal/template/build) and leased like
-- operations so that a build left running by a dead process is run again.
--
-- recipe holds the recipe's text for builds of kind recipe ('' for the
-- server's default recipe); context is the server-host directory that its copy
-- sources are relative to. digest is '' until the build succeeds; error_code
-- and error_message are NULL unless it failed.

CREATE TABLE template_builds (
    id               TEXT    NOT NULL PRIMARY KEY,
    kind             TEXT    NOT NULL,
    source           TEXT    NOT NULL,
    recipe           TEXT    NOT NULL,
    context_dir      TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    error_code       TEXT,
    error_message    TEXT,
    digest           TEXT    NOT NULL,
    steps_done       INTEGER NOT NULL,
    steps_cached     INTEGER NOT NULL,
    steps_total      INTEGER NOT NULL,
    attempts         INTEGER NOT NULL,
    lease_owner      TEXT    NOT NULL,
    lease_expires_at BIGINT  NOT NULL,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    finished_at      BIGINT
);
CREATE INDEX template_builds_order ON template_builds (created_at, id);
CREATE INDEX template_builds_state ON template_builds (state, created_at, id);
