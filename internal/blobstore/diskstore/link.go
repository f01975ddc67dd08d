package diskstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlockdev/airlock/internal/atomicfile"
	"github.com/airlockdev/airlock/internal/blobstore"
)

var _ blobstore.Linker = (*Store)(nil)

// linkPath is the file of a link: links/<kind>/<hex of from>, holding the
// target digest and a newline.
func (s *Store) linkPath(kind blobstore.LinkKind, from blobstore.Digest) string {
	return filepath.Join(s.dir, "links", kind.String(), from.Hex())
}

// PutLink implements blobstore.Linker.
func (s *Store) PutLink(ctx context.Context, kind blobstore.LinkKind, from, to blobstore.Digest) error {
	if err := blobstore.CheckLink(kind, from, to, true); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.linkPath(kind, from)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("put link %s %s: %w", kind, from, err)
	}
	if err := atomicfile.Write(p, blobstore.EncodeLink(to), 0o600); err != nil {
		return fmt.Errorf("put link %s %s: %w", kind, from, err)
	}
	return nil
}

// GetLink implements blobstore.Linker.
func (s *Store) GetLink(ctx context.Context, kind blobstore.LinkKind, from blobstore.Digest) (blobstore.Digest, error) {
	if err := blobstore.CheckLink(kind, from, blobstore.Digest{}, false); err != nil {
		return blobstore.Digest{}, err
	}
	if err := ctx.Err(); err != nil {
		return blobstore.Digest{}, err
	}
	b, err := os.ReadFile(s.linkPath(kind, from))
	if errors.Is(err, fs.ErrNotExist) {
		return blobstore.Digest{}, fmt.Errorf("%w: no %s link for %s", blobstore.ErrNotFound, kind, from)
	}
	if err != nil {
		return blobstore.Digest{}, fmt.Errorf("get link %s %s: %w", kind, from, err)
	}
	return blobstore.ParseLink(kind, from, b)
}
