package sqlstore

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// PublishAttachKeys implements store.AttachKeys.
func (s *Store) PublishAttachKeys(ctx context.Context, node model.NodeID, keys []store.AttachKey, now time.Time) error {
	if _, err := model.ParseNodeID(string(node)); err != nil {
		return fmt.Errorf("publish attach keys: %w", err)
	}
	for _, k := range keys {
		if k.ID == "" || len(k.ID) > 64 || len(k.PublicKey) != ed25519.PublicKeySize || k.CreatedAt.IsZero() {
			return fmt.Errorf("publish attach keys: %w: key %q needs an ID, a 32-byte Ed25519 public key and a creation time", model.ErrInvalid, k.ID)
		}
	}
	return s.write(ctx, false, func(t tx) error {
		for _, k := range keys {
			var notAfter int64
			if !k.NotAfter.IsZero() {
				notAfter = micro(k.NotAfter)
			}
			// A kid is unique across nodes: the upsert changes only a row of
			// the same node with the same public key (its not_after).
			res, err := t.exec(ctx, `INSERT INTO attach_keys (kid, node_id, public_key, created_at, not_after) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (kid) DO UPDATE SET not_after = excluded.not_after
				WHERE attach_keys.node_id = excluded.node_id AND attach_keys.public_key = excluded.public_key`,
				k.ID, string(node), base64.StdEncoding.EncodeToString(k.PublicKey), micro(k.CreatedAt), notAfter)
			if err != nil {
				return fmt.Errorf("publish attach key %s: %w", k.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("publish attach key %s: %w", k.ID, err)
			} else if n == 0 {
				return fmt.Errorf("publish attach key %s: %w: another node (or another public key) holds this kid", k.ID, store.ErrAlreadyExists)
			}
		}
		if _, err := t.exec(ctx, `DELETE FROM attach_keys WHERE not_after <> 0 AND not_after < ?`, micro(now)); err != nil {
			return fmt.Errorf("delete expired attach keys: %w", err)
		}
		return nil
	})
}

// GetAttachKey implements store.AttachKeys.
func (s *Store) GetAttachKey(ctx context.Context, kid string) (store.AttachKey, error) {
	var (
		node, pub         string
		created, notAfter int64
	)
	err := s.queryRow(ctx, `SELECT node_id, public_key, created_at, not_after FROM attach_keys WHERE kid = ?`, kid).
		Scan(&node, &pub, &created, &notAfter)
	if err != nil {
		return store.AttachKey{}, fmt.Errorf("get attach key %q: %w", kid, errNotFound(err))
	}
	key, err := base64.StdEncoding.DecodeString(pub)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return store.AttachKey{}, fmt.Errorf("attach key %q: corrupt public key", kid)
	}
	k := store.AttachKey{ID: kid, Node: model.NodeID(node), PublicKey: key, CreatedAt: fromMicro(created)}
	if notAfter != 0 {
		k.NotAfter = fromMicro(notAfter)
	}
	return k, nil
}
