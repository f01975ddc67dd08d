-- 017_build_project: the project a template build was queued for.
--
-- project_id is the project of the API key that queued the build (an
-- admin's import or recipe build), or '' for the server's own builds (the
-- default template). GET /v1/builds and a build's log show a member only
-- its own project's builds; admins see all. Builds from before this column
-- have no project and so are seen by admins only. The index serves a
-- project's listing newest first.

ALTER TABLE template_builds ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
CREATE INDEX template_builds_project ON template_builds (project_id, created_at, id);
