package pullthrough

import (
	"context"
	"fmt"

	"github.com/airlockdev/airlock/internal/blobstore"
)

var _ blobstore.Linker = (*Store)(nil)

// linker returns the store that keeps links: the remote one, shared by the
// nodes, if it can, else the local one.
func (s *Store) linker() (blobstore.Linker, error) {
	if l, ok := s.remote.(blobstore.Linker); ok {
		return l, nil
	}
	if l, ok := s.local.(blobstore.Linker); ok {
		return l, nil
	}
	return nil, fmt.Errorf("blob store keeps no links (%T, %T)", s.remote, s.local)
}

// PutLink implements blobstore.Linker on the remote store (else the local one).
func (s *Store) PutLink(ctx context.Context, kind blobstore.LinkKind, from, to blobstore.Digest) error {
	l, err := s.linker()
	if err != nil {
		return err
	}
	return l.PutLink(ctx, kind, from, to)
}

// GetLink implements blobstore.Linker on the remote store (else the local one).
func (s *Store) GetLink(ctx context.Context, kind blobstore.LinkKind, from blobstore.Digest) (blobstore.Digest, error) {
	l, err := s.linker()
	if err != nil {
		return blobstore.Digest{}, err
	}
	return l.GetLink(ctx, kind, from)
}
