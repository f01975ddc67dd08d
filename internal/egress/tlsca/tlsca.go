// Package tlsca is the per-deployment certificate authority of the egress proxy: an ECDSA P-256
// key and a self-signed CA certificate kept in a directory of the server (the key never leaves
// the host; sandboxes get CertPEM only, for their trust stores), and leaf certificates for DNS
// names minted on demand when the proxy terminates a sandbox's TLS.
//
// Leaves are cached in a bounded LRU and re-minted before they expire; concurrent requests for
// the same name mint once.
package tlsca

import (
	"bytes"
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/atomicfile"
)

// File names inside the CA directory.
const (
	KeyFile  = "ca.key" // PKCS#8 PEM, mode 0600
	CertFile = "ca.crt" // PEM, mode 0644
)

// Defaults for Options.
const (
	DefaultCacheSize    = 10000
	DefaultLeafValidity = 7 * 24 * time.Hour
	caValidity          = 10 * 365 * 24 * time.Hour
	backdate            = time.Hour
)

// Options tune a CA; the zero value takes the defaults.
type Options struct {
	// CacheSize bounds the leaf cache (DefaultCacheSize when 0).
	CacheSize int
	// LeafValidity is how long a leaf is valid after its issue time (DefaultLeafValidity when
	// 0). A cached leaf is re-minted once less than a quarter of it remains.
	LeafValidity time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// CA is a loaded certificate authority. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	opts    Options

	mu       sync.Mutex
	lru      *list.List // of *entry, most recent first
	byName   map[string]*list.Element
	inflight map[string]*call
	minted   uint64
}

type entry struct {
	name    string
	cert    *tls.Certificate
	refresh time.Time // re-mint after this
}

type call struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// LoadOrCreate loads the CA kept in dir, or creates one there (dir included, mode 0700) when
// dir holds neither file. A directory holding only one of the two files is an error: the CA is
// not silently replaced.
func LoadOrCreate(dir string) (*CA, error) { return LoadOrCreateWith(dir, Options{}) }

// LoadOrCreateWith is LoadOrCreate with options.
func LoadOrCreateWith(dir string, opts Options) (*CA, error) {
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.LeafValidity <= 0 {
		opts.LeafValidity = DefaultLeafValidity
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	keyPath, certPath := filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile)
	keyPEM, kerr := os.ReadFile(keyPath)
	certPEM, cerr := os.ReadFile(certPath)
	switch {
	case kerr == nil && cerr == nil:
	case errors.Is(kerr, fs.ErrNotExist) && errors.Is(cerr, fs.ErrNotExist):
		var err error
		keyPEM, certPEM, err = create(dir, keyPath, certPath, opts.Now())
		if err != nil {
			return nil, err
		}
	case kerr != nil && !errors.Is(kerr, fs.ErrNotExist):
		return nil, fmt.Errorf("tlsca: %w", kerr)
	case cerr != nil && !errors.Is(cerr, fs.ErrNotExist):
		return nil, fmt.Errorf("tlsca: %w", cerr)
	default:
		return nil, fmt.Errorf("tlsca: %s holds only one of %s and %s; restore the other or remove both to create a new CA", dir, KeyFile, CertFile)
	}
	ca, err := parse(keyPEM, certPEM)
	if err != nil {
		return nil, fmt.Errorf("tlsca: %s: %w", dir, err)
	}
	ca.opts = opts
	ca.lru = list.New()
	ca.byName = map[string]*list.Element{}
	ca.inflight = map[string]*call{}
	return ca, nil
}

func create(dir, keyPath, certPath string, now time.Time) (keyPEM, certPEM []byte, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("tlsca: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsca: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsca: %w", err)
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	serial, err := randSerial()
	if err != nil {
		return nil, nil, err
	}
	ski := subjectKeyID(&key.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Airlock"}, CommonName: fmt.Sprintf("Airlock egress CA %x", ski[:4])},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski,
	}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsca: create CA certificate: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})
	// The key first: a crash between the two writes leaves a key without a certificate, which
	// LoadOrCreate reports instead of minting a second CA over it.
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return nil, nil, fmt.Errorf("tlsca: %w", err)
	}
	if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
		return nil, nil, fmt.Errorf("tlsca: %w", err)
	}
	return keyPEM, certPEM, nil
}

func parse(keyPEM, certPEM []byte) (*CA, error) {
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: no PKCS#8 PEM private key", KeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: the key is a %T, not ECDSA", KeyFile, k)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", CertFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CertFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", CertFile)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%s does not belong to %s", CertFile, KeyFile)
	}
	return &CA{cert: cert, certPEM: pem.EncodeToMemory(cb), key: key}, nil
}

// CertPEM is the CA certificate in PEM (public: for sandboxes' trust stores).
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate is the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Minted counts the leaves minted so far (cache misses).
func (ca *CA) Minted() uint64 {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	return ca.minted
}

// Leaf returns a certificate for the DNS name (case and a trailing dot ignored), chained to the
// CA, from the cache when a fresh one is there.
func (ca *CA) Leaf(name string) (*tls.Certificate, error) {
	name, err := leafName(name)
	if err != nil {
		return nil, err
	}
	now := ca.opts.Now()
	ca.mu.Lock()
	if el, ok := ca.byName[name]; ok {
		e := el.Value.(*entry)
		if now.Before(e.refresh) {
			ca.lru.MoveToFront(el)
			ca.mu.Unlock()
			return e.cert, nil
		}
	}
	if c, ok := ca.inflight[name]; ok {
		ca.mu.Unlock()
		<-c.done
		return c.cert, c.err
	}
	c := &call{done: make(chan struct{})}
	ca.inflight[name] = c
	ca.minted++
	ca.mu.Unlock()

	c.cert, c.err = ca.mint(name, now)

	ca.mu.Lock()
	delete(ca.inflight, name)
	if c.err == nil {
		ca.storeLocked(name, c.cert)
	}
	ca.mu.Unlock()
	close(c.done)
	return c.cert, c.err
}

func (ca *CA) storeLocked(name string, cert *tls.Certificate) {
	e := &entry{name: name, cert: cert, refresh: cert.Leaf.NotAfter.Add(-ca.opts.LeafValidity / 4)}
	if el, ok := ca.byName[name]; ok {
		el.Value = e
		ca.lru.MoveToFront(el)
		return
	}
	ca.byName[name] = ca.lru.PushFront(e)
	for ca.lru.Len() > ca.opts.CacheSize {
		last := ca.lru.Back()
		ca.lru.Remove(last)
		delete(ca.byName, last.Value.(*entry).name)
	}
}

func (ca *CA) mint(name string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsca: leaf key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(ca.opts.LeafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("tlsca: leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsca: leaf for %s: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// leafName lower-cases a DNS name and drops a trailing dot; IP literals and names with
// characters no host name has are refused (the proxy never intercepts those).
func leafName(s string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(s, "."))
	if n == "" || len(n) > 253 {
		return "", fmt.Errorf("tlsca: %q is not a DNS name", s)
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "", fmt.Errorf("tlsca: %q is an IP address, not a DNS name", s)
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("tlsca: %q is not a DNS name", s)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("tlsca: %q is not a DNS name", s)
			}
		}
	}
	return n, nil
}

func randSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tlsca: serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func subjectKeyID(pub *ecdsa.PublicKey) []byte {
	b, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	h := sha256.Sum256(b)
	return h[:20]
}
