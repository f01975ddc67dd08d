-- 013_operation_trace: the trace an operation belongs to.
--
-- trace_parent is the W3C traceparent ("00-<trace id>-<span id>-<flags>") of
-- the span that recorded the operation (the API request's store call), so
-- that the controller's span of running it continues the request's trace
-- (docs/tracing.md). Empty when tracing is off or the operation was not
-- requested inside a traced request. It is read back as untrusted input: a
-- value that does not parse starts a new trace.

ALTER TABLE operations ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
