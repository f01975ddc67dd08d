package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlockdev/airlock/internal/auth"
)

// DefaultAttachKeyMaxAge is how long an attachment-token signing key signs
// before the server rotates it (Options.AttachKeyMaxAge).
const DefaultAttachKeyMaxAge = 30 * 24 * time.Hour

// attachKeyMaxAge is Options.AttachKeyMaxAge, or the default when it is not
// positive.
func attachKeyMaxAge(maxAge time.Duration) time.Duration {
	if maxAge <= 0 {
		return DefaultAttachKeyMaxAge
	}
	return maxAge
}

// rotatedKeyOverlap is how long a rotated-out signing key still verifies.
// Attachment and file tokens expire within minutes on their own; sandbox
// access tokens (E2B's envdAccessToken, which an SDK keeps for the life of
// its Sandbox object) carry no expiry and live as long as their key, so a
// rotation must not cut them at once: they stay good for a day after it
// (a connect hands out the new key's token).
const rotatedKeyOverlap = 24 * time.Hour

// openAttachKeys opens the keyring of attachment-token signing keys in
// DIR/keys/attach, creating the first key on first start and rotating a key
// older than maxAge.
func openAttachKeys(dd *dataDir, maxAge time.Duration, log *slog.Logger) (*auth.Keyring, error) {
	ring, err := auth.OpenKeyring(dd.join(attachKeysDir), auth.KeyringOptions{RotateAfter: maxAge, Overlap: rotatedKeyOverlap})
	if err != nil {
		return nil, fmt.Errorf("open attachment keys: %w", err)
	}
	for _, k := range ring.Keys() {
		if k.Active {
			log.Info("attachment signing key", "kid", k.ID, "created_at", k.CreatedAt)
		}
	}
	return ring, nil
}

// rotateAttachKeys rotates the signing key once it is older than maxAge and
// deletes retired keys, checking hourly, until ctx ends; it publishes the
// public keys again each time.
func rotateAttachKeys(ctx context.Context, ring *auth.Keyring, maxAge time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rotated, err := ring.RotateIfOlder(maxAge); err != nil {
			log.Warn("rotate attachment signing key", "err", err)
		} else if rotated {
			log.Info("attachment signing key rotated")
		}
		if err := ring.Prune(); err != nil {
			log.Warn("remove retired attachment keys", "err", err)
		}
		// Published again in case the store lost them (a restore).
		if err := ring.Publish(); err != nil {
			log.Warn("publish attachment keys", "err", err)
		}
	}
}
