package blobstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Linker is implemented by stores that also keep links: small records,
// beside the blobs, that name for a blob digest and a kind of link the
// digest of another blob ("the tree archive of template manifest D").
// Several nodes sharing the store find derived blobs through them without
// sharing a database.
//
// A link is a hint, not content: it is not covered by a digest and may be
// replaced. A reader must verify what it leads to (the template
// distributor imports the archive a link names and refuses it unless the
// result hashes to the manifest's digest).
type Linker interface {
	// PutLink records (or replaces) the link of kind from from to to.
	PutLink(ctx context.Context, kind LinkKind, from, to Digest) error
	// GetLink returns the link of kind from from, or an error wrapping
	// ErrNotFound.
	GetLink(ctx context.Context, kind LinkKind, from Digest) (Digest, error)
}

// LinkKind names a kind of link: 1 to 32 characters of [a-z0-9-].
type LinkKind struct{ s string }

// ParseLinkKind parses s. Errors wrap model.ErrInvalid.
func ParseLinkKind(s string) (LinkKind, error) {
	if len(s) == 0 || len(s) > 32 {
		return LinkKind{}, fmt.Errorf("%w: link kind %q must have 1 to 32 characters", model.ErrInvalid, textclip.Bytes(s, maxEcho))
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return LinkKind{}, fmt.Errorf("%w: link kind %q may hold only a-z, 0-9 and -", model.ErrInvalid, textclip.Bytes(s, maxEcho))
		}
	}
	return LinkKind{s: s}, nil
}

// String returns the kind's name ("" for the zero LinkKind).
func (k LinkKind) String() string { return k.s }

// IsZero reports whether k is the zero (invalid) LinkKind.
func (k LinkKind) IsZero() bool { return k.s == "" }

// CheckLink checks the arguments of PutLink and GetLink (to may be zero
// for GetLink).
func CheckLink(kind LinkKind, from, to Digest, needTo bool) error {
	if kind.IsZero() || from.IsZero() || (needTo && to.IsZero()) {
		return fmt.Errorf("%w: link needs a kind and valid digests", model.ErrInvalid)
	}
	return nil
}

// EncodeLink is the stored body of a link to to: its digest and a newline.
func EncodeLink(to Digest) []byte { return []byte(to.String() + "\n") }

// ParseLink parses the stored body b of link kind from → …; a body that
// is not a digest wraps ErrCorrupt.
func ParseLink(kind LinkKind, from Digest, b []byte) (Digest, error) {
	to, err := ParseDigest(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		return Digest{}, fmt.Errorf("%w: link %s %s: %w", ErrCorrupt, kind, from, err)
	}
	return to, nil
}
