-- 023_fssuspend: what a suspend must keep.
--
-- snapshot_kind, for a suspend operation, is the kind of snapshot it must
-- write: '' the runtime's own, 'filesystem' only the root filesystem's
-- changes (a suspend with keep_memory false, on a runtime whose suspend
-- keeps memory by default: runsc), 'memory' memory and processes. Every
-- attempt of the operation (a retry, a restarted controller finishing a
-- suspend a crash cut short) writes that kind.

ALTER TABLE operations ADD COLUMN snapshot_kind TEXT NOT NULL DEFAULT '';
