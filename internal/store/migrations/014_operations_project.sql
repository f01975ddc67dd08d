-- 014_operations_project: GET /v1/operations lists a project's operations
-- newest first, a page at a time; this index serves that order (and the
-- cursor's seek) without scanning other projects' rows. A listing of one
-- sandbox's operations uses operations_sandbox (001).

CREATE INDEX operations_project ON operations (project_id, created_at, id);
