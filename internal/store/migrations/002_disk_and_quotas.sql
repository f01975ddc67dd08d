-- 002_disk_and_quotas: the size of each sandbox's writable layer, and
-- per-project quotas.
--
-- Sandboxes stored before disk_mib existed get the default writable layer,
-- 10240 MiB (model.DefaultDiskMiB). A quota limit is NULL when unlimited.
-- A sandbox counts towards its project's quota in every state but deleted;
-- the partial index keeps the sum over live sandboxes cheap however many
-- deleted ones a project has.

ALTER TABLE sandboxes ADD COLUMN disk_mib INTEGER NOT NULL DEFAULT 10240;

ALTER TABLE projects ADD COLUMN quota_sandboxes BIGINT;
ALTER TABLE projects ADD COLUMN quota_cpus BIGINT;
ALTER TABLE projects ADD COLUMN quota_memory_mib BIGINT;
ALTER TABLE projects ADD COLUMN quota_disk_mib BIGINT;

CREATE INDEX sandboxes_project_live ON sandboxes (project_id) WHERE state <> 'deleted';
