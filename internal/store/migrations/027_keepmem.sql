-- 027_keepmem: what a sandbox's deadline suspend keeps.
--
-- timeout_snapshot_kind, for a sandbox whose on_timeout is 'suspend', is the
-- kind of snapshot the deadline's suspend writes: '' the runtime's own,
-- 'filesystem' only the root filesystem's changes (E2B's onTimeout pause
-- with keepMemory false; native timeout_keep_memory false), 'memory' memory
-- and processes. It is stored with the deadline, before any suspend: the
-- reaper carries it onto the suspend operation it queues (operations
-- .snapshot_kind, 023), so a restart anywhere in between writes that kind.

ALTER TABLE sandboxes ADD COLUMN timeout_snapshot_kind TEXT NOT NULL DEFAULT '';
