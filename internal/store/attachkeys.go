package store

import (
	"context"
	"time"

	"github.com/airlockdev/airlock/internal/model"
)

// AttachKey is the public half of one process's attachment-token signing
// key, published so that every replica verifies tokens any other signed.
// The private key never leaves its process's data dir.
type AttachKey struct {
	ID        string       // kid of the token header
	Node      model.NodeID // the process holding the private key
	PublicKey []byte       // Ed25519 public key (32 bytes)
	CreatedAt time.Time
	// NotAfter is the end of the key's overlap window after it was rotated
	// out (zero: the active key): tokens it signed are refused after it.
	NotAfter time.Time
}

// AttachKeys publishes and looks up attachment-key public keys.
type AttachKeys interface {
	// PublishAttachKeys upserts node's keys (by kid; a kid published by
	// another node is ErrAlreadyExists and nothing is written) and deletes
	// every row whose NotAfter is before now (any node's).
	PublishAttachKeys(ctx context.Context, node model.NodeID, keys []AttachKey, now time.Time) error
	// GetAttachKey returns the key kid; ErrNotFound if it is not published.
	GetAttachKey(ctx context.Context, kid string) (AttachKey, error)
}
