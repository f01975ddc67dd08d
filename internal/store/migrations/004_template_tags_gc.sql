-- 004_template_tags_gc: tagged template names, template deletion and
-- garbage collection.
--
-- template_names (name -> digest) becomes template_tags ((name, tag) ->
-- digest); every existing name keeps its meaning as name:latest. The names
-- sha256, sha384 and sha512 are reserved now ("sha256:latest" reads as a
-- digest): such a name becomes NAME-name:latest, unless that is taken.
--
-- A deleted or collected template keeps its row, because deleted sandboxes'
-- rows still reference it, but gets a tombstone (deleted_at): it is then
-- invisible to reads, and importing the same digest again clears it. Creates
-- and tag moves hold a share lock on the live template row until they commit
-- and deletes take it exclusively (see sqlstore/templategc.go); the partial
-- index keeps "which live sandboxes use this digest" cheap.

CREATE TABLE template_tags (
    name       TEXT   NOT NULL,
    tag        TEXT   NOT NULL,
    digest     TEXT   NOT NULL REFERENCES templates (digest),
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (name, tag)
);
CREATE INDEX template_tags_digest ON template_tags (digest, name, tag);

INSERT INTO template_tags (name, tag, digest, updated_at)
    SELECT name, 'latest', digest, updated_at FROM template_names
    WHERE name NOT IN ('sha256', 'sha384', 'sha512');
INSERT INTO template_tags (name, tag, digest, updated_at)
    SELECT name || '-name', 'latest', digest, updated_at FROM template_names AS old
    WHERE name IN ('sha256', 'sha384', 'sha512')
      AND NOT EXISTS (SELECT 1 FROM template_tags AS t WHERE t.name = old.name || '-name' AND t.tag = 'latest');

DROP TABLE template_names;

ALTER TABLE templates ADD COLUMN deleted_at BIGINT;

CREATE INDEX sandboxes_template_live ON sandboxes (template_digest) WHERE state <> 'deleted';
