package auth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockdev/airlock/internal/model"
)

// fakeDirectory is a store of published keys for tests.
type fakeDirectory struct {
	mu      sync.Mutex
	keys    map[string]PublishedKey
	lookups atomic.Int64
	fail    error
}

func (d *fakeDirectory) publish(keys []PublishedKey) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	if d.keys == nil {
		d.keys = map[string]PublishedKey{}
	}
	for _, k := range keys {
		d.keys[k.ID] = k
	}
	return nil
}

func (d *fakeDirectory) lookup(_ context.Context, kid string) (PublicKey, bool, error) {
	d.lookups.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail != nil {
		return PublicKey{}, false, d.fail
	}
	k, ok := d.keys[kid]
	return k.PublicKey, ok, nil
}

// TestPublishedKeysVerifyOtherReplicasTokens: replica B verifies tokens
// replica A signed once A published its keys, including after A rotates;
// nothing else verifies.
func TestPublishedKeysVerifyOtherReplicasTokens(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	dir := &fakeDirectory{}
	ringA, err := OpenKeyring(filepath.Join(t.TempDir(), "a"), KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ringB, err := OpenKeyring(filepath.Join(t.TempDir(), "b"), KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	vB, err := ringB.Verifier().WithPublished(PublishedKeysOptions{Lookup: dir.lookup, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tk := newTestKeys(t)
	c := tk.claims()
	c.IssuedAt = clock.Now()
	tok, err := ringA.Issuer().Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	// Not published yet: refused (and the miss is remembered).
	if _, err := vB.Verify(tok, clock.Now()); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("unpublished key: %v", err)
	}
	if err := ringA.SetPublisher(dir.publish); err != nil {
		t.Fatal(err)
	}
	if _, err := vB.Verify(tok, clock.Now()); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("within the miss TTL: %v, want still refused", err)
	}
	if n := dir.lookups.Load(); n != 1 {
		t.Fatalf("%d lookups, want 1", n)
	}
	clock.Set(clock.Now().Add(DefaultKeyMissTTL))
	if _, err := vB.Verify(tok, clock.Now()); err != nil {
		t.Fatalf("published key: %v", err)
	}
	for range 10 { // cached
		if _, err := vB.Verify(tok, clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n := dir.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2", n)
	}
	// A rotation publishes the new key before it signs.
	if _, err := ringA.Rotate(); err != nil {
		t.Fatal(err)
	}
	c.IssuedAt = clock.Now()
	tok2, err := ringA.Issuer().Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vB.Verify(tok2, clock.Now()); err != nil {
		t.Fatalf("token of the rotated-in key: %v", err)
	}
	// A rotation whose publication fails does not happen.
	dir.mu.Lock()
	dir.fail = errors.New("database down")
	dir.mu.Unlock()
	before := ringA.Keys()
	if _, err := ringA.Rotate(); err == nil {
		t.Fatal("rotation without publication succeeded")
	}
	if after := ringA.Keys(); len(after) != len(before) || after[len(after)-1].ID != before[len(before)-1].ID {
		t.Fatalf("keys changed by a failed rotation: %+v → %+v", before, after)
	}
	// A store that lost the keys gets them again.
	dir.mu.Lock()
	dir.fail, dir.keys = nil, nil
	dir.mu.Unlock()
	if err := ringA.Publish(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := dir.lookup(context.Background(), before[len(before)-1].ID); !ok || len(dir.keys) != len(before) {
		t.Fatalf("republished %d keys, want %d", len(dir.keys), len(before))
	}
	// B's own tokens never need the directory.
	c.IssuedAt = clock.Now()
	own, err := ringB.Issuer().Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	n := dir.lookups.Load()
	if _, err := vB.Verify(own, clock.Now()); err != nil || dir.lookups.Load() != n {
		t.Fatalf("own token: %v, %d lookups", err, dir.lookups.Load()-n)
	}
}

// TestPublishedKeysForgedKids: tokens with ever new forged kids cost at
// most the lookup budget; malformed kids are never looked up; a retired
// key is refused after its end; an expired token stays expired.
func TestPublishedKeysForgedKids(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	dir := &fakeDirectory{}
	empty, _ := NewVerifier()
	v, err := empty.WithPublished(PublishedKeysOptions{Lookup: dir.lookup, Now: clock.Now, LookupRate: 1, LookupBurst: 5})
	if err != nil {
		t.Fatal(err)
	}
	tk := newTestKeys(t)
	for range 100 {
		forged := sign(t, jwt.SigningMethodEdDSA, tk.priv, newKeyID(), tk.wire(tk.claims()))
		if _, err := v.Verify(forged, tk.now); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("forged kid: %v", err)
		}
	}
	if n := dir.lookups.Load(); n != 5 {
		t.Fatalf("%d lookups for 100 forged kids, want the burst of 5", n)
	}
	clock.Set(clock.Now().Add(time.Hour))
	n := dir.lookups.Load()
	for _, kid := range []string{"", "../../etc/passwd", "AAAAAAAAAAAAAAAA", "x' OR 1=1"} {
		forged := sign(t, jwt.SigningMethodEdDSA, tk.priv, kid, tk.wire(tk.claims()))
		if _, err := v.Verify(forged, tk.now); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("kid %q: %v", kid, err)
		}
	}
	if dir.lookups.Load() != n {
		t.Fatal("a malformed kid was looked up")
	}
	// The same unknown kid again and again: one lookup per miss TTL.
	kid := newKeyID()
	for range 50 {
		forged := sign(t, jwt.SigningMethodEdDSA, tk.priv, kid, tk.wire(tk.claims()))
		_, _ = v.Verify(forged, tk.now)
	}
	if got := dir.lookups.Load() - n; got != 1 {
		t.Fatalf("%d lookups of one unknown kid, want 1", got)
	}

	// A published key that was retired: refused after its end.
	_ = dir.publish([]PublishedKey{{PublicKey: PublicKey{ID: tk.kid, Key: tk.priv.Public().(ed25519.PublicKey), NotAfter: tk.now.Add(time.Minute)}}})
	tok := tk.issue(t, tk.claims())
	if _, err := v.Verify(tok, tk.now); err != nil {
		t.Fatalf("published key: %v", err)
	}
	if _, err := v.Verify(tok, tk.now.Add(61*time.Second)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("retired key after its end: %v", err)
	}
	if _, err := v.Verify(tok, tk.now.Add(AttachTokenTTL+ClockSkew+time.Second)); err == nil {
		t.Fatal("expired token verified")
	}
}

func TestForwardToken(t *testing.T) {
	tk := newTestKeys(t)
	from, to := model.NewNodeID(), model.NewNodeID()
	tok, err := tk.issuer.IssueForward(ForwardClaims{From: from, To: to, Request: "GET /v1/x", Base: "https://a.example", IssuedAt: tk.now})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tk.verifier.VerifyForward(tok, tk.now)
	if err != nil || c.From != from || c.To != to || c.Request != "GET /v1/x" || c.Base != "https://a.example" {
		t.Fatalf("VerifyForward = %+v, %v", c, err)
	}
	if _, err := tk.verifier.VerifyForward(tok, tk.now.Add(ForwardTokenTTL+ClockSkew+time.Second)); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("expired: %v", err)
	}
	// Kinds never mix: an attachment token is no forward token and back.
	att := tk.issue(t, tk.claims())
	if _, err := tk.verifier.VerifyForward(ForwardTokenPrefix+att[len(attachmentPrefix):], tk.now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("attachment token as forward token: %v", err)
	}
	if _, err := tk.verifier.Verify(attachmentPrefix+tok[len(ForwardTokenPrefix):], tk.now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("forward token as attachment token: %v", err)
	}
}
