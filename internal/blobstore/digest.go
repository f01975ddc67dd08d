package blobstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Algorithm is the only digest algorithm of the store.
const Algorithm = "sha256"

// Digest is a blob's content address, "sha256:" + 64 lower-case hex
// characters. The zero Digest is invalid; the only ways to make a valid one
// are ParseDigest, FromSHA256 and FromBytes, so a Digest in hand has been
// checked once and needs no checking again.
type Digest struct {
	s string // "sha256:<hex>", or "" for the zero Digest
}

// ParseDigest parses s, which must be "sha256:" followed by 64 lower-case
// hex characters. Errors wrap model.ErrInvalid.
func ParseDigest(s string) (Digest, error) {
	const prefix = Algorithm + ":"
	if len(s) != len(prefix)+2*sha256.Size || s[:len(prefix)] != prefix {
		return Digest{}, fmt.Errorf("%w: blob digest %q must be sha256:<64 hex characters>", model.ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for i := len(prefix); i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return Digest{}, fmt.Errorf("%w: blob digest %q must be lower-case hex", model.ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return Digest{s: s}, nil
}

// FromSHA256 returns the digest of raw SHA-256 bytes.
func FromSHA256(sum [sha256.Size]byte) Digest {
	return Digest{s: Algorithm + ":" + hex.EncodeToString(sum[:])}
}

// FromBytes returns the digest of b.
func FromBytes(b []byte) Digest { return FromSHA256(sha256.Sum256(b)) }

// FromTemplateDigest converts a template digest (the same format) into a
// blob digest, parsing it.
func FromTemplateDigest(d model.TemplateDigest) (Digest, error) { return ParseDigest(string(d)) }

// TemplateDigest returns d as a template digest.
func (d Digest) TemplateDigest() model.TemplateDigest { return model.TemplateDigest(d.s) }

// String returns "sha256:<hex>" ("" for the zero Digest).
func (d Digest) String() string { return d.s }

// Hex returns the 64 hex characters ("" for the zero Digest).
func (d Digest) Hex() string {
	if d.s == "" {
		return ""
	}
	return d.s[len(Algorithm)+1:]
}

// IsZero reports whether d is the zero (invalid) Digest.
func (d Digest) IsZero() bool { return d.s == "" }

// MarshalText implements encoding.TextMarshaler.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.s), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it parses.
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// maxEcho is how many bytes of a value an error message quotes (textclip.Bytes).
const maxEcho = 80
