-- 011_pools: warm pools.
--
-- pools holds one row per pool key: template (the operator's template
-- reference, a name or a sha256 digest), environment (an environment name,
-- '' on servers without environments), cpus, memory_mib; size the ready
-- sandboxes each node keeps per release; current_digest and
-- previous_digest the releases kept warm (''  : none yet); hits and misses
-- the creates that matched it; last_used_at (unix microseconds, 0: never)
-- when a create last matched it.
--
-- A pool's unclaimed sandboxes are ordinary sandbox rows of the system
-- project (below) with sandboxes.pool_id set; a claim moves one to the
-- claiming project and clears pool_id. sandboxes.source and
-- operations.source say how a create got its sandbox running: cold, pool
-- or snapshot ('' : not yet, or a row from before pools).

CREATE TABLE pools (
    id              TEXT    NOT NULL PRIMARY KEY,
    template        TEXT    NOT NULL,
    environment     TEXT    NOT NULL,
    cpus            INTEGER NOT NULL,
    memory_mib      INTEGER NOT NULL,
    size            INTEGER NOT NULL,
    current_digest  TEXT    NOT NULL,
    previous_digest TEXT    NOT NULL,
    hits            BIGINT  NOT NULL,
    misses          BIGINT  NOT NULL,
    last_used_at    BIGINT  NOT NULL,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    UNIQUE (template, environment, cpus, memory_mib)
);

ALTER TABLE sandboxes ADD COLUMN pool_id TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN source TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN source TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_pool ON sandboxes (pool_id, node_id, state) WHERE pool_id <> '';

-- The owner of unclaimed pool sandboxes; no API key is ever made for it.
INSERT INTO projects (id, name, created_at) VALUES ('prj_systemaaaaaaaaaaaaaaaaaaaa', '(system)', 0);
