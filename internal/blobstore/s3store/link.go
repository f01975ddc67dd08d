package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/minio/minio-go/v7"

	"github.com/airlockdev/airlock/internal/blobstore"
)

var _ blobstore.Linker = (*Store)(nil)

// maxLink bounds what GetLink reads of a link object.
const maxLink = 256

// LinkKey returns the object key of a link: <prefix>links/<kind>/<hex of
// from>, holding the target digest and a newline.
func (s *Store) LinkKey(kind blobstore.LinkKind, from blobstore.Digest) string {
	return s.prefix + "links/" + kind.String() + "/" + from.Hex()
}

// PutLink implements blobstore.Linker.
func (s *Store) PutLink(ctx context.Context, kind blobstore.LinkKind, from, to blobstore.Digest) error {
	if err := blobstore.CheckLink(kind, from, to, true); err != nil {
		return err
	}
	body := blobstore.EncodeLink(to)
	err := s.retryRace(ctx, func() error {
		_, err := s.core.PutObject(ctx, s.bucket, s.LinkKey(kind, from), bytes.NewReader(body), int64(len(body)), "", "", minio.PutObjectOptions{})
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("put link %s %s: %w", kind, from, err)
	}
	return nil
}

// GetLink implements blobstore.Linker.
func (s *Store) GetLink(ctx context.Context, kind blobstore.LinkKind, from blobstore.Digest) (blobstore.Digest, error) {
	if err := blobstore.CheckLink(kind, from, blobstore.Digest{}, false); err != nil {
		return blobstore.Digest{}, err
	}
	body, _, _, err := s.core.GetObject(ctx, s.bucket, s.LinkKey(kind, from), minio.GetObjectOptions{})
	if err != nil {
		if notFound(err) {
			return blobstore.Digest{}, fmt.Errorf("%w: no %s link for %s", blobstore.ErrNotFound, kind, from)
		}
		if ctx.Err() != nil {
			return blobstore.Digest{}, ctx.Err()
		}
		return blobstore.Digest{}, fmt.Errorf("get link %s %s: %w", kind, from, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxLink))
	if err != nil {
		return blobstore.Digest{}, fmt.Errorf("get link %s %s: %w", kind, from, err)
	}
	return blobstore.ParseLink(kind, from, b)
}
