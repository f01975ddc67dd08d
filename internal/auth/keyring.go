package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/textclip"
)

// MinKeyOverlap is the shortest time a rotated-out key keeps verifying: long
// enough for every token it signed to expire, clock skew included.
const MinKeyOverlap = AttachTokenTTL + ClockSkew

const (
	keyFileExt  = ".key"
	keyIDBytes  = 10 // 80 bits → 16 base32 characters
	keyIDLength = 16
)

// checkKeyID accepts only key IDs as newKeyID makes them, so a kid is always
// safe as a file name.
func checkKeyID(kid string) error {
	if len(kid) != keyIDLength || strings.Trim(kid, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return fmt.Errorf("auth: key ID %q must be %d lower-case base32 characters", textclip.Bytes(kid, maxEcho), keyIDLength)
	}
	return nil
}

func newKeyID() string {
	b := make([]byte, keyIDBytes)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return secretEncoding.EncodeToString(b)
}

// KeyringOptions configure OpenKeyring.
type KeyringOptions struct {
	// RotateAfter rotates on open when the active key is older; 0 never does.
	RotateAfter time.Duration
	// Overlap is how long a rotated-out key still verifies; 0 or less than
	// MinKeyOverlap means MinKeyOverlap.
	Overlap time.Duration
	// Now is the keyring's clock; nil: time.Now.
	Now func() time.Time
}

// Keyring is the API's set of attachment-token signing keys, kept as one
// file per key in a directory (0700, files 0600, written atomically): one
// active key signs, the keys it replaced keep verifying for the overlap
// window after their rotation, then they are deleted.
type Keyring struct {
	dir     string
	overlap time.Duration
	now     func() time.Time

	mu   sync.RWMutex
	keys []signingKey // oldest first; the last is active

	// public is the public halves of keys, republished on every change. It
	// is all a Verifier from this ring can reach: no private key material.
	public *publicSet

	// publisher, if set, publishes the public halves where other
	// processes find them, before a new key signs anything.
	publisher KeyPublisher
}

// PublishedKey is the public half of one key of a ring, as published.
type PublishedKey struct {
	PublicKey
	CreatedAt time.Time
}

// KeyPublisher publishes the public halves of all of a ring's keys (oldest
// first, the last active) where other processes find them (the store's
// attach_keys). It never sees a private key.
type KeyPublisher func(keys []PublishedKey) error

// SetPublisher publishes the ring's keys with p now and makes every later
// rotation publish the new key (and the old one's end) before the new key
// signs: a rotation whose publication fails does not happen.
func (k *Keyring) SetPublisher(p KeyPublisher) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := p(k.publicKeys(k.keys)); err != nil {
		return fmt.Errorf("publish attach keys: %w", err)
	}
	k.publisher = p
	return nil
}

// Publish publishes the ring's keys again with the publisher set by
// SetPublisher (none: nothing happens), e.g. periodically, in case the
// store lost them.
func (k *Keyring) Publish() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.publisher == nil {
		return nil
	}
	if err := k.publisher(k.publicKeys(k.keys)); err != nil {
		return fmt.Errorf("publish attach keys: %w", err)
	}
	return nil
}

// publicKeys returns the public halves of keys (the last active).
func (k *Keyring) publicKeys(keys []signingKey) []PublishedKey {
	out := make([]PublishedKey, len(keys))
	for i, key := range keys {
		out[i] = PublishedKey{PublicKey: PublicKey{ID: key.id, Key: key.private.Public().(ed25519.PublicKey)}, CreatedAt: key.created}
		if i < len(keys)-1 {
			out[i].NotAfter = keys[i+1].created.Add(k.overlap)
		}
	}
	return out
}

// publicSet is a snapshot of verification keys that can be swapped atomically.
type publicSet struct {
	keys atomic.Pointer[[]PublicKey]
}

func (p *publicSet) load() []PublicKey {
	if ks := p.keys.Load(); ks != nil {
		return *ks
	}
	return nil
}

// keyFile is the on-disk form of one key.
type keyFile struct {
	ID        string    `json:"kid"`
	CreatedAt time.Time `json:"created_at"`
	Seed      string    `json:"ed25519_seed"` // base64 (std) of the 32-byte seed
}

// OpenKeyring loads the keys in dir, creating dir and a first key if there
// are none, rotates if the active key is older than opts.RotateAfter, and
// deletes keys whose overlap window has passed.
func OpenKeyring(dir string, opts KeyringOptions) (*Keyring, error) {
	k := &Keyring{dir: dir, overlap: max(opts.Overlap, MinKeyOverlap), now: opts.Now, public: &publicSet{}}
	if k.now == nil {
		k.now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("attach keys: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("attach keys: %w", err)
	}
	keys, err := loadKeys(dir)
	if err != nil {
		return nil, err
	}
	k.keys = keys
	k.publish()
	if len(keys) == 0 {
		if _, err := k.Rotate(); err != nil {
			return nil, err
		}
	} else if opts.RotateAfter > 0 {
		if _, err := k.RotateIfOlder(opts.RotateAfter); err != nil {
			return nil, err
		}
	}
	if err := k.prune(); err != nil {
		return nil, err
	}
	return k, nil
}

func loadKeys(dir string) ([]signingKey, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("attach keys: %w", err)
	}
	var keys []signingKey
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, keyFileExt) || !e.Type().IsRegular() {
			continue // atomicfile's temporaries and anything else
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("attach keys: %w", err)
		}
		key, err := decodeKeyFile(b)
		if err != nil {
			return nil, fmt.Errorf("attach key %s: %w", name, err)
		}
		if key.id+keyFileExt != name {
			return nil, fmt.Errorf("attach key %s: holds key %q", name, key.id)
		}
		keys = append(keys, key)
	}
	sortKeys(keys)
	return keys, nil
}

func sortKeys(keys []signingKey) {
	slices.SortFunc(keys, func(a, b signingKey) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
}

func decodeKeyFile(b []byte) (signingKey, error) {
	var f keyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return signingKey{}, err
	}
	if err := checkKeyID(f.ID); err != nil {
		return signingKey{}, err
	}
	seed, err := base64.StdEncoding.DecodeString(f.Seed)
	if err != nil || len(seed) != ed25519.SeedSize {
		return signingKey{}, errors.New("bad ed25519_seed")
	}
	if f.CreatedAt.IsZero() {
		return signingKey{}, errors.New("no created_at")
	}
	return signingKey{id: f.ID, private: ed25519.NewKeyFromSeed(seed), created: f.CreatedAt}, nil
}

// Rotate makes a new active key; the previous ones keep verifying for the
// overlap window. It returns the new key's ID.
func (k *Keyring) Rotate() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kid, err := k.rotateLocked()
	if err != nil {
		return "", err
	}
	return kid, k.pruneLocked()
}

// RotateIfOlder rotates if the active key is older than maxAge.
func (k *Keyring) RotateIfOlder(maxAge time.Duration) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) > 0 && k.now().Sub(k.keys[len(k.keys)-1].created) <= maxAge {
		return false, nil
	}
	if _, err := k.rotateLocked(); err != nil {
		return false, err
	}
	return true, nil
}

func (k *Keyring) rotateLocked() (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate attach key: %w", err)
	}
	created := k.now().UTC()
	if n := len(k.keys); n > 0 && !created.After(k.keys[n-1].created) {
		created = k.keys[n-1].created.Add(time.Nanosecond) // a clock that went back
	}
	key := signingKey{id: newKeyID(), private: priv, created: created}
	if k.publisher != nil {
		// Other processes must know the key before it signs anything.
		if err := k.publisher(k.publicKeys(append(slices.Clip(k.keys), key))); err != nil {
			return "", fmt.Errorf("publish attach key: %w", err)
		}
	}
	b, err := json.Marshal(keyFile{ID: key.id, CreatedAt: created, Seed: base64.StdEncoding.EncodeToString(priv.Seed())})
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(filepath.Join(k.dir, key.id+keyFileExt), append(b, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("save attach key: %w", err)
	}
	k.keys = append(k.keys, key)
	k.publish()
	return key.id, nil
}

// prune deletes the keys whose overlap window has passed.
func (k *Keyring) prune() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pruneLocked()
}

func (k *Keyring) pruneLocked() error {
	now := k.now()
	kept := k.keys[:0]
	for i, key := range k.keys {
		if i < len(k.keys)-1 && now.After(k.keys[i+1].created.Add(k.overlap)) {
			if err := os.Remove(filepath.Join(k.dir, key.id+keyFileExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove retired attach key: %w", err)
			}
			continue
		}
		kept = append(kept, key)
	}
	k.keys = kept
	k.publish()
	return nil
}

// Prune deletes the keys whose overlap window has passed (Verify refuses
// them already; this only tidies the directory).
func (k *Keyring) Prune() error { return k.prune() }

// KeyInfo describes one key of the ring (public information only).
type KeyInfo struct {
	ID        string
	CreatedAt time.Time
	Active    bool
	NotAfter  time.Time // zero for the active key: end of the key's overlap window
}

// Keys lists the ring's keys, oldest first.
func (k *Keyring) Keys() []KeyInfo {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]KeyInfo, len(k.keys))
	for i, key := range k.keys {
		out[i] = KeyInfo{ID: key.id, CreatedAt: key.created, Active: i == len(k.keys)-1}
		if i < len(k.keys)-1 {
			out[i].NotAfter = k.keys[i+1].created.Add(k.overlap)
		}
	}
	return out
}

// Issuer returns an Issuer that always signs with the ring's active key.
func (k *Keyring) Issuer() *Issuer {
	return &Issuer{active: func() signingKey {
		k.mu.RLock()
		defer k.mu.RUnlock()
		return k.keys[len(k.keys)-1]
	}}
}

// Verifier returns a Verifier over the public halves of the ring's keys,
// following rotations. It holds no private key.
func (k *Keyring) Verifier() *Verifier {
	return &Verifier{keys: k.public.load}
}

// publish replaces the public snapshot; k.mu must be held (or k unshared).
func (k *Keyring) publish() {
	pub := k.publicKeys(k.keys)
	out := make([]PublicKey, len(pub))
	for i, p := range pub {
		out[i] = p.PublicKey
	}
	k.public.keys.Store(&out)
}
