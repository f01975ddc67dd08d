-- 001_init: Airlock's initial schema.
--
-- Written in the subset of SQL that both SQLite and PostgreSQL accept.
-- Timestamps are BIGINT unix microseconds (UTC). {{BYTES}} is replaced by the
-- dialect's binary type (SQLite BLOB, PostgreSQL BYTEA). Maps and lists are
-- JSON in TEXT columns; metadata is also kept row-per-pair in sandbox_metadata
-- so that it can be filtered portably.

CREATE TABLE projects (
    id         TEXT   NOT NULL PRIMARY KEY,
    name       TEXT   NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id          TEXT    NOT NULL PRIMARY KEY,
    project_id  TEXT    NOT NULL REFERENCES projects (id),
    role        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    secret_hash {{BYTES}} NOT NULL,
    created_at  BIGINT  NOT NULL,
    revoked_at  BIGINT
);
CREATE INDEX api_keys_project ON api_keys (project_id, created_at, id);

CREATE TABLE templates (
    digest     TEXT    NOT NULL PRIMARY KEY,
    size_bytes BIGINT  NOT NULL,
    manifest   {{BYTES}} NOT NULL,
    created_at BIGINT  NOT NULL
);

CREATE TABLE template_names (
    name       TEXT   NOT NULL PRIMARY KEY,
    digest     TEXT   NOT NULL REFERENCES templates (digest),
    updated_at BIGINT NOT NULL
);
CREATE INDEX template_names_digest ON template_names (digest, name);

CREATE TABLE sandboxes (
    id              TEXT    NOT NULL PRIMARY KEY,
    project_id      TEXT    NOT NULL REFERENCES projects (id),
    template_digest TEXT    NOT NULL REFERENCES templates (digest),
    cpus            INTEGER NOT NULL,
    memory_mib      INTEGER NOT NULL,
    env             TEXT    NOT NULL,
    metadata        TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    state_reason    TEXT    NOT NULL,
    node_id         TEXT    NOT NULL,
    runtime         TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL
);
CREATE INDEX sandboxes_project_order ON sandboxes (project_id, created_at, id);
CREATE INDEX sandboxes_node ON sandboxes (node_id, state);

CREATE TABLE sandbox_metadata (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, key)
);
CREATE INDEX sandbox_metadata_pair ON sandbox_metadata (key, value, sandbox_id);

CREATE TABLE operations (
    id               TEXT    NOT NULL PRIMARY KEY,
    project_id       TEXT    NOT NULL REFERENCES projects (id),
    sandbox_id       TEXT    NOT NULL REFERENCES sandboxes (id),
    kind             TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    error_code       TEXT,
    error_message    TEXT,
    attempts         INTEGER NOT NULL,
    lease_owner      TEXT    NOT NULL,
    lease_expires_at BIGINT  NOT NULL,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    finished_at      BIGINT
);
CREATE INDEX operations_unfinished ON operations (created_at, id) WHERE state IN ('pending', 'running');
CREATE INDEX operations_sandbox ON operations (sandbox_id, created_at, id);

CREATE TABLE command_sessions (
    id          TEXT    NOT NULL PRIMARY KEY,
    project_id  TEXT    NOT NULL REFERENCES projects (id),
    sandbox_id  TEXT    NOT NULL REFERENCES sandboxes (id),
    process_id  TEXT    NOT NULL UNIQUE,
    spec        TEXT    NOT NULL,
    token_hash  {{BYTES}} NOT NULL,
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL,
    attached_at BIGINT
);
CREATE INDEX command_sessions_sandbox ON command_sessions (sandbox_id);

CREATE TABLE idempotency (
    project_id   TEXT    NOT NULL,
    key_hash     {{BYTES}} NOT NULL,
    method       TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    request_hash {{BYTES}} NOT NULL,
    status       INTEGER NOT NULL,
    sealed_body  {{BYTES}} NOT NULL,
    created_at   BIGINT  NOT NULL,
    PRIMARY KEY (project_id, key_hash)
);
CREATE INDEX idempotency_created ON idempotency (created_at);
