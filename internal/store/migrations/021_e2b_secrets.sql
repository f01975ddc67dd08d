-- 021_e2b_secrets: secrets carry metadata and a version (issue 28, E2B's
-- secrets API on Airlock's secrets).
--
-- metadata is the owner's key/value data as a JSON object; version is 1
-- when a secret is created and counts each replacement of its value. A
-- secret's ID (sec_…) is derived from its project, name and created_at,
-- so it needs no column.

ALTER TABLE secrets ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
ALTER TABLE secrets ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
