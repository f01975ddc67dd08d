-- 010_attach_keys: the public halves of every process's attachment-token
-- signing keys, so that any replica verifies tokens any other signed.
--
-- kid is the key ID of the token header (16 lower-case base32 characters);
-- node_id the process that holds the private key (which never leaves its
-- data dir); public_key the Ed25519 public key, base64 (std); created_at the
-- key's creation; not_after (unix microseconds, 0: none) the end of its
-- overlap window once it was rotated out: tokens it signed are refused
-- after it, and the row may be deleted.

CREATE TABLE attach_keys (
    kid        TEXT   NOT NULL PRIMARY KEY,
    node_id    TEXT   NOT NULL,
    public_key TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    not_after  BIGINT NOT NULL
);
CREATE INDEX attach_keys_node ON attach_keys (node_id);
