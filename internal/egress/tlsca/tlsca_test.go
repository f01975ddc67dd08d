package tlsca

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func roots(t *testing.T, ca *CA) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CertPEM does not parse")
	}
	return p
}

func TestLeafVerifies(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ask, verify string }{
		{"api.example.com", "api.example.com"},
		{"API.Example.COM.", "api.example.com"},
		{"pypi.org", "pypi.org"},
		{"under_score.test", "under_score.test"},
	} {
		t.Run(tc.ask, func(t *testing.T) {
			c, err := ca.Leaf(tc.ask)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Certificate) != 2 || c.Leaf == nil || c.PrivateKey == nil {
				t.Fatalf("incomplete certificate: %d DER, leaf %v", len(c.Certificate), c.Leaf != nil)
			}
			if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: tc.verify, Roots: roots(t, ca)}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots(t, ca)}); err == nil {
				t.Fatal("leaf verifies for another name")
			}
			if d := time.Until(c.Leaf.NotBefore); d > -50*time.Minute {
				t.Fatalf("leaf not backdated: NotBefore %v", c.Leaf.NotBefore)
			}
		})
	}
}

func TestLeafRefused(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "203.0.113.7", "::1", "a..b", "sp ace.com", "*.example.com", "x/y"} {
		if _, err := ca.Leaf(name); err == nil {
			t.Errorf("Leaf(%q) succeeded", name)
		}
	}
}

func TestPublicPartOnly(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rest := ca.CertPEM()
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			t.Fatalf("CertPEM holds a %s block", b.Type)
		}
	}
}

func TestCache(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ca, err := LoadOrCreateWith(t.TempDir(), Options{CacheSize: 2, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := ca.Leaf("a.test")
	a2, _ := ca.Leaf("A.test")
	if a1 != a2 || ca.Minted() != 1 {
		t.Fatalf("cache miss on a second call (minted %d)", ca.Minted())
	}
	ca.Leaf("b.test")
	ca.Leaf("a.test") // a most recent, b least
	ca.Leaf("c.test") // evicts b
	if ca.Minted() != 3 {
		t.Fatalf("minted %d, want 3", ca.Minted())
	}
	if a3, _ := ca.Leaf("a.test"); a3 != a1 {
		t.Fatal("recently used leaf was evicted")
	}
	ca.Leaf("b.test")
	if ca.Minted() != 4 {
		t.Fatalf("least recently used leaf not evicted (minted %d)", ca.Minted())
	}
	// Close to expiry: re-minted.
	mu.Lock()
	now = now.Add(DefaultLeafValidity - DefaultLeafValidity/8)
	mu.Unlock()
	a4, err := ca.Leaf("a.test")
	if err != nil {
		t.Fatal(err)
	}
	if a4 == a1 || !a4.Leaf.NotAfter.After(a1.Leaf.NotAfter) {
		t.Fatal("leaf near expiry was not refreshed")
	}
}

func TestConcurrentDedupe(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]any, 64)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ca.Leaf("same.test")
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		}()
	}
	wg.Wait()
	for _, c := range got {
		if c != got[0] {
			t.Fatal("concurrent callers got different leaves")
		}
	}
	if ca.Minted() != 1 {
		t.Fatalf("minted %d leaves for one name", ca.Minted())
	}
}

func TestFilesAndReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca1, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("dir holds %d entries, want the key and the certificate", len(entries))
	}
	ca2, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(ca1.CertPEM()) != string(ca2.CertPEM()) || !ca1.key.Equal(ca2.key) {
		t.Fatal("reload gave a different CA")
	}
	// A leaf of the reloaded CA verifies against the first one's certificate.
	c, err := ca2.Leaf("x.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "x.test", Roots: roots(t, ca1)}); err != nil {
		t.Fatal(err)
	}
}

func TestHalfPresentRefused(t *testing.T) {
	for _, keep := range []string{KeyFile, CertFile} {
		t.Run(keep, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreate(dir); err != nil {
				t.Fatal(err)
			}
			other := KeyFile
			if keep == KeyFile {
				other = CertFile
			}
			if err := os.Remove(filepath.Join(dir, other)); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadOrCreate(dir); err == nil {
				t.Fatal("a directory with one file loaded")
			}
		})
	}
}

func TestMismatchedFilesRefused(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	for _, d := range []string{d1, d2} {
		if _, err := LoadOrCreate(d); err != nil {
			t.Fatal(err)
		}
	}
	other, _ := os.ReadFile(filepath.Join(d2, CertFile))
	if err := os.WriteFile(filepath.Join(d1, CertFile), other, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(d1); err == nil {
		t.Fatal("a certificate of another key loaded")
	}
}

func FuzzLeafName(f *testing.F) {
	for _, s := range []string{"a.test", "A.B.", "1.2.3.4", "::1", "", "a..b", "x_y.z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := leafName(s)
		if err != nil {
			return
		}
		if n2, err := leafName(n); err != nil || n2 != n {
			t.Fatalf("leafName not idempotent: %q -> %q -> %q, %v", s, n, n2, err)
		}
	})
}
