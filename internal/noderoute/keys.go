package noderoute

import (
	"context"
	"errors"
	"time"

	"github.com/airlockdev/airlock/internal/auth"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/store"
)

// publishTimeout bounds one publication of a keyring's public keys.
const publishTimeout = 10 * time.Second

// KeyPublisher publishes a keyring's public keys in the store as node's
// (auth.Keyring.SetPublisher), so that every replica verifies the tokens
// this process signs. Private keys never leave the keyring.
func KeyPublisher(st store.AttachKeys, node model.NodeID) auth.KeyPublisher {
	return func(keys []auth.PublishedKey) error {
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		out := make([]store.AttachKey, len(keys))
		for i, k := range keys {
			out[i] = store.AttachKey{ID: k.ID, Node: node, PublicKey: k.Key, CreatedAt: k.CreatedAt, NotAfter: k.NotAfter}
		}
		return st.PublishAttachKeys(ctx, node, out, time.Now())
	}
}

// KeyLookup finds the public keys other processes published
// (auth.PublishedKeysOptions.Lookup).
func KeyLookup(st store.AttachKeys) auth.KeyLookup {
	return func(ctx context.Context, kid string) (auth.PublicKey, bool, error) {
		k, err := st.GetAttachKey(ctx, kid)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return auth.PublicKey{}, false, nil
		case err != nil:
			return auth.PublicKey{}, false, err
		}
		return auth.PublicKey{ID: k.ID, Key: k.PublicKey, NotAfter: k.NotAfter}, true, nil
	}
}

// ClusterVerifier returns a Verifier of the tokens any replica signed: the
// local ring's keys, then the published ones (cached; see
// auth.PublishedKeysOptions).
func ClusterVerifier(local *auth.Verifier, st store.AttachKeys) (*auth.Verifier, error) {
	return local.WithPublished(auth.PublishedKeysOptions{Lookup: KeyLookup(st)})
}
