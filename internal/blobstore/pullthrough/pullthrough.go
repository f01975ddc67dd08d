// Package pullthrough composes a local blob store (a node's disk) with a
// remote one that several nodes share (an S3 bucket): blobs are pushed to
// the remote when they are put and pulled from it, by digest, when a node
// opens one it does not have.
//
// Digests are verified at every hop: a pulled blob goes through the local
// store's Put, which refuses content that does not hash to its digest (so a
// corrupt remote object never lands on disk), and a pushed blob is read
// through the local store's verifying reader, so a corrupt local copy is
// never pushed. Concurrent Opens of one missing blob pull it once.
package pullthrough

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
)

// Store is a local store in front of a remote one. It is a blobstore.Store
// itself; see each method for how it uses the two.
type Store struct {
	local, remote blobstore.Store
	logger        *slog.Logger

	mu    sync.Mutex
	pulls map[blobstore.Digest]chan struct{} // closed when that pull ends
}

var _ blobstore.Store = (*Store)(nil)

// New returns a Store that caches remote's blobs in local.
func New(local, remote blobstore.Store, logger *slog.Logger) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Store{local: local, remote: remote, logger: logger, pulls: map[blobstore.Digest]chan struct{}{}}
}

// Local returns the local store.
func (s *Store) Local() blobstore.Store { return s.local }

// Remote returns the remote store.
func (s *Store) Remote() blobstore.Store { return s.remote }

// Put stores the blob locally (verified) and then pushes it to the remote.
// If the push fails, the blob stays local and Put returns the error; Put
// again (or Push) to retry.
func (s *Store) Put(ctx context.Context, d blobstore.Digest, r io.Reader, size int64) error {
	if err := s.local.Put(ctx, d, r, size); err != nil {
		return err
	}
	return s.Push(ctx, d)
}

// Push copies the local blob d to the remote, unless the remote has it.
// The copy is read through the local store's verifying reader and verified
// again by the remote's Put.
func (s *Store) Push(ctx context.Context, d blobstore.Digest) error {
	if _, err := s.remote.Stat(ctx, d); err == nil {
		return nil
	} else if !errors.Is(err, blobstore.ErrNotFound) {
		return fmt.Errorf("push blob %s: %w", d, err)
	}
	rc, size, err := s.local.Open(ctx, d)
	if errors.Is(err, blobstore.ErrNotFound) {
		// Deleted since it was put (a concurrent Delete): nothing to push.
		return nil
	}
	if err != nil {
		return fmt.Errorf("push blob %s: %w", d, err)
	}
	defer rc.Close()
	start := time.Now()
	if err := s.remote.Put(ctx, d, rc, size); err != nil {
		return fmt.Errorf("push blob %s: %w", d, err)
	}
	s.logger.Debug("blob pushed", "digest", d.String(), "bytes", size, "took", time.Since(start))
	return nil
}

// Open opens the local copy of d, pulling it from the remote first if
// there is none.
func (s *Store) Open(ctx context.Context, d blobstore.Digest) (io.ReadCloser, int64, error) {
	rc, size, err := s.local.Open(ctx, d)
	if !errors.Is(err, blobstore.ErrNotFound) {
		return rc, size, err
	}
	if err := s.pull(ctx, d); err != nil {
		return nil, 0, err
	}
	return s.local.Open(ctx, d)
}

// pull makes sure the local store has d, copying it from the remote. Of
// concurrent callers for one digest, one copies and the others wait for it
// and then look again (and copy themselves if it failed).
func (s *Store) pull(ctx context.Context, d blobstore.Digest) error {
	for {
		if _, err := s.local.Stat(ctx, d); err == nil {
			return nil
		} else if !errors.Is(err, blobstore.ErrNotFound) {
			return err
		}
		s.mu.Lock()
		done, busy := s.pulls[d]
		if !busy {
			done = make(chan struct{})
			s.pulls[d] = done
		}
		s.mu.Unlock()
		if busy {
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := s.fetch(ctx, d)
		s.mu.Lock()
		delete(s.pulls, d)
		s.mu.Unlock()
		close(done)
		return err
	}
}

// fetch copies d from the remote into the local store; the local Put
// verifies it (and so does the remote's verifying reader).
func (s *Store) fetch(ctx context.Context, d blobstore.Digest) error {
	start := time.Now()
	rc, size, err := s.remote.Open(ctx, d)
	if err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return err
		}
		return fmt.Errorf("pull blob %s: %w", d, err)
	}
	defer rc.Close()
	if err := s.local.Put(ctx, d, rc, size); err != nil {
		if errors.Is(err, blobstore.ErrCorrupt) {
			s.logger.Error("pulled blob is corrupt; not cached", "digest", d.String(), "err", err)
		}
		return fmt.Errorf("pull blob %s: %w", d, err)
	}
	s.logger.Info("blob pulled", "digest", d.String(), "bytes", size, "took", time.Since(start))
	return nil
}

// Stat reports the local copy, else the remote's.
func (s *Store) Stat(ctx context.Context, d blobstore.Digest) (blobstore.Info, error) {
	info, err := s.local.Stat(ctx, d)
	if errors.Is(err, blobstore.ErrNotFound) {
		return s.remote.Stat(ctx, d)
	}
	return info, err
}

// Delete removes d from both stores; it returns ErrNotFound only if neither
// had it. Garbage collection of a shared remote must know that no node
// still needs the blob; to drop only this node's copy, use Evict.
func (s *Store) Delete(ctx context.Context, d blobstore.Digest) error {
	errLocal := s.local.Delete(ctx, d)
	errRemote := s.remote.Delete(ctx, d)
	for _, err := range []error{errLocal, errRemote} {
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			return err
		}
	}
	if errLocal != nil && errRemote != nil {
		return errLocal // neither had it
	}
	return nil
}

// Evict removes the local copy of d only.
func (s *Store) Evict(ctx context.Context, d blobstore.Digest) error { return s.local.Delete(ctx, d) }

// List yields the blobs of the remote and then those only the local store
// has (put, but not pushed yet). It remembers the remote's digests to do so.
func (s *Store) List(ctx context.Context) iter.Seq2[blobstore.Info, error] {
	return func(yield func(blobstore.Info, error) bool) {
		seen := map[blobstore.Digest]bool{}
		for info, err := range s.remote.List(ctx) {
			if err != nil {
				yield(blobstore.Info{}, err)
				return
			}
			seen[info.Digest] = true
			if !yield(info, nil) {
				return
			}
		}
		for info, err := range s.local.List(ctx) {
			if err != nil {
				yield(blobstore.Info{}, err)
				return
			}
			if seen[info.Digest] {
				continue
			}
			if !yield(info, nil) {
				return
			}
		}
	}
}
