-- 005_egress: egress policies, profiles and secrets (issue 8).
--
-- A sandbox's egress policy is the policy.Spec its create request or a
-- later PUT gave, as JSON ('{}' when none was given: the server's default).
-- sandbox_egress_profiles lists the profiles that policy names, so that a
-- profile still used by a live sandbox is not deleted.
--
-- An egress profile is a named policy.Spec without default or profiles
-- (admin-defined, global).
--
-- A secret belongs to a project; its value is stored sealed (AEAD with the
-- server's key, the project and the name as associated data: see internal/egress/secrets),
-- never in clear. hosts is a JSON array of host patterns.

ALTER TABLE sandboxes ADD COLUMN egress TEXT NOT NULL DEFAULT '{}';

CREATE TABLE egress_profiles (
    name       TEXT   NOT NULL PRIMARY KEY,
    spec       TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE sandbox_egress_profiles (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
    profile    TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, profile)
);
CREATE INDEX sandbox_egress_profiles_profile ON sandbox_egress_profiles (profile, sandbox_id);

CREATE TABLE secrets (
    project_id TEXT    NOT NULL REFERENCES projects (id),
    name       TEXT    NOT NULL,
    sealed     {{BYTES}} NOT NULL,
    hosts      TEXT    NOT NULL,
    header     TEXT    NOT NULL,
    format     TEXT    NOT NULL,
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (project_id, name)
);
