// Package diskstore is a blobstore.Store in a local directory.
//
// Layout under the store's directory:
//
//	blobs/sha256/ab/ab<62 more hex>   a blob, named by its full digest (0600)
//	tmp/put-*                         Puts in progress
//	quarantine/<hex>.<time>           blobs found corrupt, kept for inspection
//
// A Put writes into a fresh file under tmp/, verifying length and digest as
// it goes, fsyncs it, renames it into blobs/ and fsyncs the directory, so a
// file under blobs/ is always complete and, when written, verified. Blobs are
// private to the owner (snapshots hold sandbox memory). Several stores (and
// processes) may share one directory.
package diskstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"

	"github.com/airlockdev/airlock/internal/atomicfile"
)

// staleTemp is the age after which a file under tmp/ is taken for the
// leftover of a crashed Put and removed by Open. A live Put writes to its
// file continuously, which keeps its modification time fresh.
const staleTemp = time.Hour

// Store is a blob store in one directory.
type Store struct {
	dir    string
	logger *slog.Logger
}

var _ blobstore.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir and removes leftovers of
// crashed Puts.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	s := &Store{dir: abs, logger: logger}
	for _, d := range []string{abs, filepath.Join(abs, "blobs"), s.algDir(), s.tmpDir(), s.quarantineDir()} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("blob store: %w", err)
		}
	}
	s.removeStaleTemps()
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) algDir() string        { return filepath.Join(s.dir, "blobs", blobstore.Algorithm) }
func (s *Store) tmpDir() string        { return filepath.Join(s.dir, "tmp") }
func (s *Store) quarantineDir() string { return filepath.Join(s.dir, "quarantine") }

// Path returns the file that holds blob d (which may not exist). Tests use
// it to tamper with a blob behind the store's back.
func (s *Store) Path(d blobstore.Digest) string {
	h := d.Hex()
	return filepath.Join(s.algDir(), h[:2], h)
}

func (s *Store) removeStaleTemps() {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		s.logger.Warn("blob store: list temporary files", "err", err)
		return
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < staleTemp {
			continue
		}
		if err := os.Remove(filepath.Join(s.tmpDir(), e.Name())); err == nil {
			s.logger.Info("blob store: removed leftover of an interrupted put", "file", e.Name())
		}
	}
}

// Put implements blobstore.Store.
func (s *Store) Put(ctx context.Context, d blobstore.Digest, r io.Reader, size int64) (err error) {
	if d.IsZero() || size < 0 {
		return fmt.Errorf("put blob %s: invalid digest or negative size %d", d, size)
	}
	if info, err := s.Stat(ctx, d); err == nil {
		if info.Size != size {
			return &blobstore.MismatchError{Want: d, WantSize: size, GotSize: info.Size}
		}
		return nil
	} else if !errors.Is(err, blobstore.ErrNotFound) {
		return err
	}
	f, err := os.CreateTemp(s.tmpDir(), "put-*")
	if err != nil {
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	in := blobstore.NewInput(ctx, r, d, size)
	if _, err := io.Copy(f, in); err != nil {
		if errors.Is(err, blobstore.ErrMismatch) {
			return err
		}
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	if err := f.Close(); err != nil {
		f = nil
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	f = nil
	if err := ctx.Err(); err != nil {
		return err
	}
	dst := s.Path(d)
	if err := os.Mkdir(filepath.Dir(dst), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	// A concurrent Put of the same digest may have renamed its file first:
	// replacing it with the same verified bytes is harmless.
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("put blob %s: %w", d, err)
	}
	return nil
}

// Open implements blobstore.Store. A blob found corrupt while it is read is
// moved to quarantine/ and logged, so it is never served again.
func (s *Store) Open(ctx context.Context, d blobstore.Digest) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if d.IsZero() {
		return nil, 0, fmt.Errorf("open blob: zero digest")
	}
	f, err := os.Open(s.Path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: %s", blobstore.ErrNotFound, d)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", d, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open blob %s: %w", d, err)
	}
	onCorrupt := func(err error) { s.quarantine(d, f, err) }
	return blobstore.VerifyingReader(ctx, f, d, fi.Size(), onCorrupt), fi.Size(), nil
}

// quarantine moves the corrupt blob that f has open out of blobs/, unless
// the path already holds another file (a fresh, verified Put).
func (s *Store) quarantine(d blobstore.Digest, f *os.File, cause error) {
	path := s.Path(d)
	opened, err1 := f.Stat()
	current, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(opened, current) {
		s.logger.Error("blob store: corrupt blob (already replaced or removed)", "digest", d.String(), "err", cause)
		return
	}
	q := filepath.Join(s.quarantineDir(), d.Hex()+"."+strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := os.Rename(path, q); err != nil {
		s.logger.Error("blob store: corrupt blob; moving it to quarantine failed", "digest", d.String(), "err", cause, "rename_err", err)
		return
	}
	s.logger.Error("blob store: corrupt blob moved to quarantine", "digest", d.String(), "err", cause, "quarantine", q)
}

// Stat implements blobstore.Store.
func (s *Store) Stat(ctx context.Context, d blobstore.Digest) (blobstore.Info, error) {
	if err := ctx.Err(); err != nil {
		return blobstore.Info{}, err
	}
	if d.IsZero() {
		return blobstore.Info{}, fmt.Errorf("stat blob: zero digest")
	}
	fi, err := os.Stat(s.Path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return blobstore.Info{}, fmt.Errorf("%w: %s", blobstore.ErrNotFound, d)
	}
	if err != nil {
		return blobstore.Info{}, fmt.Errorf("stat blob %s: %w", d, err)
	}
	return blobstore.Info{Digest: d, Size: fi.Size()}, nil
}

// Delete implements blobstore.Store.
func (s *Store) Delete(ctx context.Context, d blobstore.Digest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.IsZero() {
		return fmt.Errorf("delete blob: zero digest")
	}
	err := os.Remove(s.Path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", blobstore.ErrNotFound, d)
	}
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", d, err)
	}
	return nil
}

// List implements blobstore.Store. Files under blobs/ whose names are not
// digests in the right fan-out directory are skipped with a warning.
func (s *Store) List(ctx context.Context) iter.Seq2[blobstore.Info, error] {
	return func(yield func(blobstore.Info, error) bool) {
		fans, err := os.ReadDir(s.algDir())
		if err != nil {
			yield(blobstore.Info{}, fmt.Errorf("list blobs: %w", err))
			return
		}
		for _, fan := range fans {
			if !fan.IsDir() {
				continue
			}
			entries, err := os.ReadDir(filepath.Join(s.algDir(), fan.Name()))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				yield(blobstore.Info{}, fmt.Errorf("list blobs: %w", err))
				return
			}
			for _, e := range entries {
				if err := ctx.Err(); err != nil {
					yield(blobstore.Info{}, err)
					return
				}
				d, err := blobstore.ParseDigest(blobstore.Algorithm + ":" + e.Name())
				if err != nil || !strings.HasPrefix(e.Name(), fan.Name()) || !e.Type().IsRegular() {
					s.logger.Warn("blob store: stray file among blobs", "file", filepath.Join(fan.Name(), e.Name()))
					continue
				}
				fi, err := e.Info()
				if errors.Is(err, fs.ErrNotExist) {
					continue // deleted meanwhile
				}
				if err != nil {
					yield(blobstore.Info{}, fmt.Errorf("list blobs: %w", err))
					return
				}
				if !yield(blobstore.Info{Digest: d, Size: fi.Size()}, nil) {
					return
				}
			}
		}
	}
}

// Temps returns the names of the files under tmp/: Puts in progress or
// leftovers of failed ones. The conformance suite checks that a refused or
// cancelled Put leaves none.
func (s *Store) Temps() ([]string, error) {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}
