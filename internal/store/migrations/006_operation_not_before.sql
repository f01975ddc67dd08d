-- 006_operation_not_before: a retried operation's own delay.
--
-- not_before is when a retried operation may be claimed again (unix
-- microseconds; 0: at once). The controller's retry path sets it to now plus
-- a backoff with jitter and gives up its lease, instead of shortening the
-- lease to the backoff: the lease says who holds an operation, not when it
-- may run.

ALTER TABLE operations ADD COLUMN not_before BIGINT NOT NULL DEFAULT 0;
