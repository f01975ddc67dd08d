package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/model"
)

// KeyFile is the key's file name in the server's data directory.
const KeyFile = "secrets.key"

// KeySize is the key's length: AES-256.
const KeySize = 32

// sealVersion is the first byte of every sealed value, so that the format
// can change without guessing.
const sealVersion byte = 1

// ErrOpen is wrapped when a sealed value does not open: another key, another
// name, or damaged bytes.
var ErrOpen = errors.New("sealed secret does not open with this server's key")

// Sealer seals and opens secret values with the server's key.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer over a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secrets: key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// OpenKey returns the Sealer of the key in path, creating the key first if
// the file does not exist: 32 random bytes, mode 0600, written to a
// temporary file and linked into place, so that of two servers starting at
// once one key wins and both use it. A key file of the wrong size or with
// permissions for group or others is refused.
func OpenKey(path string) (*Sealer, error) {
	key, err := readKey(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := createKey(path); err != nil {
			return nil, err
		}
		key, err = readKey(path)
	}
	if err != nil {
		return nil, err
	}
	return NewSealer(key)
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets: key %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: key %s must be a regular file of mode 0600 (it is %s)", path, fi.Mode())
	}
	if fi.Size() != KeySize {
		return nil, fmt.Errorf("secrets: key %s is %d bytes, want %d", path, fi.Size(), KeySize)
	}
	key := make([]byte, KeySize)
	if _, err := f.ReadAt(key, 0); err != nil {
		return nil, fmt.Errorf("secrets: read key %s: %w", path, err)
	}
	return key, nil
}

func createKey(path string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".secrets-key-*")
	if err != nil {
		return fmt.Errorf("secrets: create key: %w", err)
	}
	defer os.Remove(tmp.Name())
	key := make([]byte, KeySize)
	_, _ = rand.Read(key) // crypto/rand.Read never fails on Linux
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("secrets: create key: %w", err)
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return fmt.Errorf("secrets: create key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("secrets: create key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secrets: create key: %w", err)
	}
	// Link, unlike rename, never replaces: a key another process made
	// first stays, and this one is dropped.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("secrets: create key: %w", err)
	}
	return atomicfile.SyncDir(dir)
}

// associatedData binds a sealed value to its project and name.
func associatedData(project model.ProjectID, name Name) []byte {
	return []byte("airlock-secret\x00" + string(project) + "\x00" + string(name))
}

// Seal encrypts v for the secret name of project.
func (s *Sealer) Seal(project model.ProjectID, name Name, v Value) []byte {
	return s.sealAD(associatedData(project, name), v)
}

// sealAD encrypts plain bound to the associated data ad.
func (s *Sealer) sealAD(ad, plain []byte) []byte {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:]) // crypto/rand.Read never fails on Linux
	return s.aead.Seal(out, out[1:], plain, ad)
}

// Open decrypts a value sealed for the secret name of project; ErrOpen if
// it does not open.
func (s *Sealer) Open(project model.ProjectID, name Name, sealed []byte) (Value, error) {
	v, err := s.openAD(associatedData(project, name), sealed)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return Value(v), nil
}

// openAD decrypts what sealAD sealed with ad; ErrOpen if it does not open.
func (s *Sealer) openAD(ad, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n+s.aead.Overhead() || sealed[0] != sealVersion {
		return nil, fmt.Errorf("%w (unknown format)", ErrOpen)
	}
	v, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return v, nil
}
