-- 007_sandbox_lifecycle: what suspend, wake, idle limits, deadlines and
-- execution environments need on a sandbox.
--
-- environment is the env:sha256: reference of the execution environment the
-- sandbox runs in ('' for sandboxes stored before environments existed).
-- snapshot is the JSON record of a suspended sandbox's snapshot (kind,
-- environment, format, location, size, created_at), NULL when it has none.
-- idle_timeout_ms is the idle limit (0: never); deadline (unix microseconds,
-- 0: none) and on_timeout ('delete' or 'suspend') its deadline;
-- last_activity_at (unix microseconds) when it was last used.

ALTER TABLE sandboxes ADD COLUMN environment TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN snapshot TEXT;
ALTER TABLE sandboxes ADD COLUMN idle_timeout_ms BIGINT NOT NULL DEFAULT 21600000;
ALTER TABLE sandboxes ADD COLUMN deadline BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'delete';
ALTER TABLE sandboxes ADD COLUMN last_activity_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX sandboxes_deadline ON sandboxes (deadline) WHERE deadline <> 0;
