-- 009_nodes: several `airlock server` processes on one database.
--
-- nodes holds one row per node process identity (its data dir's node ID):
-- incarnation is the current run's fencing token ("inc_…", new on every
-- start); role all, api or node; advertise_url where other processes reach
-- it; slots, cpus and memory_mib its capacity for placement (0: unbounded);
-- labels a JSON object; can_pull 1 when it reaches the shared blob store;
-- state active, cordoned, draining or dead, with state_reason; started_at
-- and heartbeat_at (unix microseconds, the database's clock).
--
-- node_templates lists the templates each node holds locally, as the node
-- last reported them.
--
-- sandboxes.node_selector is the JSON object of labels a sandbox's node must
-- carry ('' : any node), kept for placing it again after its node is lost.
-- operations.lease_incarnation is the incarnation of the lease holder: a
-- lease is only honoured for the holder's current incarnation.

CREATE TABLE nodes (
    id            TEXT    NOT NULL PRIMARY KEY,
    incarnation   TEXT    NOT NULL,
    role          TEXT    NOT NULL,
    advertise_url TEXT    NOT NULL,
    slots         INTEGER NOT NULL,
    cpus          INTEGER NOT NULL,
    memory_mib    INTEGER NOT NULL,
    labels        TEXT    NOT NULL,
    can_pull      INTEGER NOT NULL,
    state         TEXT    NOT NULL,
    state_reason  TEXT    NOT NULL,
    started_at    BIGINT  NOT NULL,
    heartbeat_at  BIGINT  NOT NULL
);

CREATE TABLE node_templates (
    node_id TEXT NOT NULL,
    digest  TEXT NOT NULL,
    PRIMARY KEY (node_id, digest)
);
CREATE INDEX node_templates_digest ON node_templates (digest, node_id);

ALTER TABLE sandboxes ADD COLUMN node_selector TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN lease_incarnation TEXT NOT NULL DEFAULT '';
