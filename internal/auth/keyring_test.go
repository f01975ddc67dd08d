package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func TestKeyringCreatesAndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys", "attach")
	clock := &fakeClock{t: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	ring, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	keys := ring.Keys()
	if len(keys) != 1 || !keys[0].Active {
		t.Fatalf("keys %+v, want one active", keys)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	kf := filepath.Join(dir, keys[0].ID+".key")
	if fi, err := os.Stat(kf); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want 0600", fi, err)
	}
	tk := newTestKeys(t)
	tok, err := ring.Issuer().Issue(tk.claims())
	if err != nil {
		t.Fatal(err)
	}

	// A restart finds the same key: tokens issued before it still verify.
	again, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now, RotateAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Keys(); len(got) != 1 || got[0].ID != keys[0].ID {
		t.Fatalf("after reopen keys %+v, want %s", got, keys[0].ID)
	}
	if _, err := again.Verifier().Verify(tok, tk.now); err != nil {
		t.Fatalf("token from before the restart: %v", err)
	}

	// A corrupt key file stops the start rather than being skipped.
	if err := os.WriteFile(filepath.Join(dir, newKeyID()+".key"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now}); err == nil {
		t.Fatal("opened a keyring with a corrupt key")
	}
}

// TestKeyringRotationOverlap: a token issued before a rotation verifies
// during the overlap window and not after it; new tokens use the new key.
func TestKeyringRotationOverlap(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	clock := &fakeClock{t: start}
	ring, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now, Overlap: time.Second}) // raised to MinKeyOverlap
	if err != nil {
		t.Fatal(err)
	}
	iss, ver := ring.Issuer(), ring.Verifier()
	tk := newTestKeys(t)
	c := tk.claims()
	c.IssuedAt = start
	c.ExpiresAt = start.Add(24 * time.Hour) // long-lived, so only the key's window can end it
	old, err := iss.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	short := c
	short.ExpiresAt = time.Time{}
	oldShort, err := iss.Issue(short)
	if err != nil {
		t.Fatal(err)
	}
	oldKid := ring.Keys()[0].ID

	rotatedAt := start.Add(10 * time.Second)
	clock.Set(rotatedAt)
	newKid, err := ring.Rotate()
	if err != nil || newKid == oldKid {
		t.Fatalf("Rotate = %q, %v", newKid, err)
	}
	c.IssuedAt = rotatedAt
	fresh, err := iss.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ver.Verify(fresh, rotatedAt); err != nil || got.KeyID != newKid {
		t.Fatalf("new token: kid %q, %v; want %s", got.KeyID, err, newKid)
	}
	// A short-lived token from before the rotation lives out its life.
	if _, err := ver.Verify(oldShort, start.Add(AttachTokenTTL+ClockSkew-time.Second)); err != nil {
		t.Fatalf("pre-rotation token near its expiry: %v", err)
	}
	end := rotatedAt.Add(MinKeyOverlap)
	for _, at := range []time.Time{rotatedAt, end.Add(-time.Second), end} {
		if got, err := ver.Verify(old, at); err != nil || got.KeyID != oldKid {
			t.Fatalf("old token at rotation+%s: kid %q, %v", at.Sub(rotatedAt), got.KeyID, err)
		}
	}
	if _, err := ver.Verify(old, end.Add(time.Second)); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("old token after the overlap window: %v, want ErrInvalidToken", err)
	}

	// A restart after the window deletes the retired key's file.
	clock.Set(end.Add(time.Minute))
	again, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if keys := again.Keys(); len(keys) != 1 || keys[0].ID != newKid {
		t.Fatalf("keys after the window %+v, want only %s", keys, newKid)
	}
	if _, err := os.Stat(filepath.Join(dir, oldKid+".key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("retired key file: %v", err)
	}
	if _, err := again.Verifier().Verify(old, clock.Now()); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("old token after restart: %v", err)
	}
}

func TestKeyringRotatesOldKeyOnOpen(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ring, err := OpenKeyring(dir, KeyringOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	first := ring.Keys()[0].ID
	clock.Set(clock.Now().Add(29 * 24 * time.Hour))
	if ring, err = OpenKeyring(dir, KeyringOptions{Now: clock.Now, RotateAfter: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if keys := ring.Keys(); len(keys) != 1 || keys[0].ID != first {
		t.Fatalf("rotated a young key: %+v", keys)
	}
	clock.Set(clock.Now().Add(2 * 24 * time.Hour))
	if ring, err = OpenKeyring(dir, KeyringOptions{Now: clock.Now, RotateAfter: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	keys := ring.Keys()
	if len(keys) != 2 || keys[0].ID != first || keys[0].Active || !keys[1].Active || keys[1].ID == first {
		t.Fatalf("keys after open with an old key %+v, want the old one retired and a new active one", keys)
	}
	if !keys[0].NotAfter.Equal(keys[1].CreatedAt.Add(MinKeyOverlap)) {
		t.Fatalf("overlap ends %v, want %v", keys[0].NotAfter, keys[1].CreatedAt.Add(MinKeyOverlap))
	}
	// The private key never appears in the public listing or the verifier.
	for _, pk := range ring.public.load() {
		if len(pk.Key) != 32 || strings.Contains(string(pk.Key), "seed") {
			t.Fatalf("public key %x", pk.Key)
		}
	}
}

func TestKeyringConcurrentRotateAndIssue(t *testing.T) {
	ring, err := OpenKeyring(t.TempDir(), KeyringOptions{})
	if err != nil {
		t.Fatal(err)
	}
	iss, ver := ring.Issuer(), ring.Verifier()
	tk := newTestKeys(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				c := tk.claims()
				c.IssuedAt = time.Now()
				tok, err := iss.Issue(c)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := ver.Verify(tok, time.Now()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if _, err := ring.Rotate(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
}
