-- 015_duty_leases: the cluster-wide duties (declaring nodes dead, placing
-- sandboxes without a node) run on one node at a time.
--
-- duty_leases holds one row per duty: owner and incarnation are the node
-- run that holds it, expires_at (unix microseconds, the database's clock)
-- when another node may take it.

CREATE TABLE duty_leases (
    name        TEXT    NOT NULL PRIMARY KEY,
    owner       TEXT    NOT NULL,
    incarnation TEXT    NOT NULL,
    expires_at  BIGINT  NOT NULL
);
