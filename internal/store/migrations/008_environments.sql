-- 008_environments: execution environments (internal/environment) and what
-- each node found out about them.
--
-- environments holds each definition once, by its reference (ref, the
-- env:sha256: of definition, its canonical encoding); name is the
-- environment's name ("runsc", …) and schema_version the definition's;
-- first_seen (unix microseconds) when a node first recorded it.
--
-- node_environments is each node's view of the definitions it detected at
-- its last start: enabled (1: the operator enabled it with --env), available
-- (1: its probe ran a sandbox) and, when not available, the reason;
-- checked_at (unix microseconds) when the node checked. A node replaces all
-- of its rows at once.

CREATE TABLE environments (
    ref            TEXT    NOT NULL PRIMARY KEY,
    name           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    definition     TEXT    NOT NULL,
    first_seen     BIGINT  NOT NULL
);

CREATE TABLE node_environments (
    node_id    TEXT    NOT NULL,
    ref        TEXT    NOT NULL REFERENCES environments (ref),
    enabled    INTEGER NOT NULL,
    available  INTEGER NOT NULL,
    reason     TEXT    NOT NULL,
    checked_at BIGINT  NOT NULL,
    PRIMARY KEY (node_id, ref)
);
CREATE INDEX node_environments_ref ON node_environments (ref, node_id);
