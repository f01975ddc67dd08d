-- 025_snapblob: saved snapshots kept in the shared blob store.
--
-- snapshots.blob_state: '' (its files are only on node_id), 'saving' (ready
-- there, being pushed) or 'stored' (blob_manifest, the digest of its blob
-- manifest, names them in the blob store; any node can pull it).
--
-- snapshot_blobs: the blobs each snapshot holds (a claim, written before
-- the blobs are pushed). Blobs are content addressed, so snapshots share
-- them; a blob goes from the blob store only once no snapshot claims it.
-- snapshot_blob_locks has one row per claimed digest: claims and deletions
-- of a digest lock it, so a push never claims a blob a deletion is
-- removing (deleting = 1: refused until the deletion is done and the row
-- forgotten).

ALTER TABLE snapshots ADD COLUMN blob_state TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN blob_manifest TEXT NOT NULL DEFAULT '';

CREATE TABLE snapshot_blobs (
    snapshot_id TEXT NOT NULL,
    digest      TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, digest)
);
CREATE INDEX snapshot_blobs_digest ON snapshot_blobs (digest);

CREATE TABLE snapshot_blob_locks (
    digest   TEXT    NOT NULL PRIMARY KEY,
    deleting INTEGER NOT NULL
);
CREATE INDEX snapshot_blob_locks_deleting ON snapshot_blob_locks (deleting);
