-- 012_audit: the audit log, one row per mutating API request.
--
-- audit holds one row per request to a mutating route (internal/api records
-- it after the handler ran): id, ascending in commit order (audit_seq
-- hands it out under a row lock, so an id never becomes visible after a
-- larger one: pages by id lose nothing); at (unix microseconds); the
-- request's X-Request-Id; the principal: key_id and project ('' : none,
-- e.g. a sandbox access token, whose sandbox is token_sandbox); method,
-- route (the routing pattern) and action (method and route); the resource:
-- resource_kind, resource_id (the route's last path value), path_values (a
-- JSON object of every path value), created_id (the ID a create answered
-- with) and sandbox (the sandbox concerned, '' : none); the result: status
-- (HTTP) and error_code ('' : none).
--
-- Rows older than the audit retention are purged (internal/reaper).

CREATE TABLE audit_seq (
    id   INTEGER NOT NULL PRIMARY KEY,
    last BIGINT  NOT NULL
);
INSERT INTO audit_seq (id, last) VALUES (1, 0);

CREATE TABLE audit (
    id            BIGINT  NOT NULL PRIMARY KEY,
    at            BIGINT  NOT NULL,
    request_id    TEXT    NOT NULL,
    key_id        TEXT    NOT NULL,
    project       TEXT    NOT NULL,
    token_sandbox TEXT    NOT NULL,
    method        TEXT    NOT NULL,
    route         TEXT    NOT NULL,
    action        TEXT    NOT NULL,
    resource_kind TEXT    NOT NULL,
    resource_id   TEXT    NOT NULL,
    path_values   TEXT    NOT NULL,
    created_id    TEXT    NOT NULL,
    sandbox       TEXT    NOT NULL,
    status        INTEGER NOT NULL,
    error_code    TEXT    NOT NULL
);
CREATE INDEX audit_at ON audit (at);
CREATE INDEX audit_project ON audit (project, id);
CREATE INDEX audit_sandbox ON audit (sandbox, id) WHERE sandbox <> '';
