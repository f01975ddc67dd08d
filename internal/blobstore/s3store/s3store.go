// Package s3store is a blobstore.Store in a bucket of an S3-compatible
// object store, shared by several nodes. It uses minio-go's low-level
// (Core) API.
//
// Blob d is the object <prefix>blobs/sha256/<hex>, with the user metadata
// Airlock-Digest: sha256:<hex>. Nothing that comes back from the bucket is
// trusted: Open hashes what it reads and fails with ErrCorrupt at the end if
// the object does not hash to its key (or its metadata names another
// digest).
//
// Put does not trust its caller, the client library or the network either:
// it hashes the input itself, sends each request with our own SHA-256 of the
// payload as x-amz-content-sha256 (so the server refuses bytes that changed
// on the way), and publishes only a verified blob. A blob of up to PartSize
// bytes is read into memory, checked and sent in one PUT; a larger one goes
// as a multipart upload, one part in memory at a time, and the upload is
// completed only after the whole input hashed to the expected digest;
// otherwise (mismatch, error, cancelled context) it is aborted, so a refused
// Put leaves no object and no incomplete upload.
package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/retry"
)

// metaDigest is the user metadata key (x-amz-meta-airlock-digest) that
// repeats an object's digest.
const metaDigest = "Airlock-Digest"

// abortTimeout bounds the clean-up of a failed multipart upload, which runs
// even when the Put's context has ended.
const abortTimeout = time.Minute

// Store is a blob store in one bucket (under a key prefix).
type Store struct {
	core     minio.Core
	bucket   string
	prefix   string
	partSize int64
	logger   *slog.Logger
}

var _ blobstore.Store = (*Store)(nil)

// New checks cfg (see Config) and returns a Store. It does not contact the
// server; Check does.
func New(cfg Config, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, u, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	secure := u.Scheme == "https"
	if !secure && !isLoopback(u.Host) {
		logger.Warn("s3 blob store: plain http to a remote endpoint: blobs and signatures travel unencrypted", "endpoint", cfg.Endpoint)
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 blob store: %w", err)
	}
	return &Store{
		core:     minio.Core{Client: client},
		bucket:   cfg.Bucket,
		prefix:   cfg.Prefix,
		partSize: cfg.PartSize,
		logger:   logger.With("bucket", cfg.Bucket),
	}, nil
}

// Check verifies that the bucket exists and the credentials can reach it.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.core.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("s3 blob store: bucket %s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("s3 blob store: bucket %s does not exist", s.bucket)
	}
	return nil
}

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// Key returns the object key of blob d.
func (s *Store) Key(d blobstore.Digest) string {
	return s.blobPrefix() + d.Hex()
}

func (s *Store) blobPrefix() string { return s.prefix + "blobs/" + blobstore.Algorithm + "/" }

// notFound reports whether err is S3's answer for a missing object.
func notFound(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound
}

// Put implements blobstore.Store; see the package doc.
func (s *Store) Put(ctx context.Context, d blobstore.Digest, r io.Reader, size int64) error {
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
	in := blobstore.NewInput(ctx, r, d, size)
	opts := minio.PutObjectOptions{
		UserMetadata: map[string]string{metaDigest: d.String()},
		ContentType:  "application/octet-stream",
		// Sign our own SHA-256 of the payload (x-amz-content-sha256) rather
		// than let the client stream-sign what it reads, over http too.
		DisableContentSha256: true,
	}
	partSize := partSizeFor(s.partSize, size)
	if size <= partSize {
		return s.putSingle(ctx, d, in, size, opts)
	}
	return s.putMultipart(ctx, d, in, size, partSize, opts)
}

// putErr wraps err unless it is the input's mismatch or the context's end,
// which callers test for directly.
func putErr(d blobstore.Digest, err error) error {
	if errors.Is(err, blobstore.ErrMismatch) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("put blob %s: %w", d, err)
}

func (s *Store) putSingle(ctx context.Context, d blobstore.Digest, in *blobstore.Input, size int64, opts minio.PutObjectOptions) error {
	buf := make([]byte, size)
	if _, err := io.ReadFull(in, buf); err != nil {
		return putErr(d, err)
	}
	if err := in.Finish(); err != nil {
		return putErr(d, err)
	}
	// The server checks the payload against d's hex (x-amz-content-sha256).
	err := s.retryRace(ctx, func() error {
		_, err := s.core.PutObject(ctx, s.bucket, s.Key(d), bytes.NewReader(buf), size, "", d.Hex(), opts)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return putErr(d, err)
	}
	return nil
}

// retryRace runs publish (a PUT or a multipart completion) again, a few
// times, when the server answers ExistingObjectIsDirectory. Our keys are
// never directories: a gateway on a POSIX file system (versitygw) answers
// that when a concurrent DELETE removes the now-empty parent directories
// between its mkdir and its link of the new object. Publishing the same
// verified content again is harmless.
func (s *Store) retryRace(ctx context.Context, publish func() error) error {
	wait := retry.Policy{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, Jitter: 0.2}.Start(nil)
	for attempt := 1; ; attempt++ {
		err := publish()
		if err == nil || attempt == 5 || minio.ToErrorResponse(err).Code != "ExistingObjectIsDirectory" {
			return err
		}
		s.logger.Debug("s3 blob store: publish raced a concurrent delete; retrying", "attempt", attempt, "err", err)
		if err := wait.Wait(ctx); err != nil {
			return err
		}
	}
}

func (s *Store) putMultipart(ctx context.Context, d blobstore.Digest, in *blobstore.Input, size, partSize int64, opts minio.PutObjectOptions) (err error) {
	key := s.Key(d)
	uploadID, err := s.core.NewMultipartUpload(ctx, s.bucket, key, opts)
	if err != nil {
		return putErr(d, err)
	}
	defer func() {
		if err == nil {
			return
		}
		// The Put's context may be over: clean up under a context of our own.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		if aerr := s.core.AbortMultipartUpload(actx, s.bucket, key, uploadID); aerr != nil {
			s.logger.Error("s3 blob store: abort of a failed multipart upload failed; the bucket's lifecycle rules must remove it",
				"digest", d.String(), "upload_id", uploadID, "err", aerr)
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
	}()
	buf := make([]byte, partSize)
	var parts []minio.CompletePart
	for part, off := 1, int64(0); off < size; part++ {
		n := min(partSize, size-off)
		if _, err := io.ReadFull(in, buf[:n]); err != nil {
			return putErr(d, err)
		}
		sum := sha256.Sum256(buf[:n])
		p, err := s.core.PutObjectPart(ctx, s.bucket, key, uploadID, part, bytes.NewReader(buf[:n]), n,
			minio.PutObjectPartOptions{Sha256Hex: hex.EncodeToString(sum[:]), DisableContentSha256: true})
		if err != nil {
			return putErr(d, fmt.Errorf("part %d: %w", part, err))
		}
		parts = append(parts, minio.CompletePart{PartNumber: part, ETag: p.ETag})
		off += n
	}
	// Only a verified input is published.
	if err := in.Finish(); err != nil {
		return putErr(d, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err = s.retryRace(ctx, func() error {
		_, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, uploadID, parts, opts)
		return err
	})
	if err != nil {
		return putErr(d, fmt.Errorf("complete: %w", err))
	}
	return nil
}

// Open implements blobstore.Store. A blob found corrupt is logged; it stays
// in the bucket (which other nodes share) for the operator to inspect.
func (s *Store) Open(ctx context.Context, d blobstore.Digest) (io.ReadCloser, int64, error) {
	if d.IsZero() {
		return nil, 0, fmt.Errorf("open blob: zero digest")
	}
	key := s.Key(d)
	body, info, _, err := s.core.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if notFound(err) {
			return nil, 0, fmt.Errorf("%w: %s", blobstore.ErrNotFound, d)
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, fmt.Errorf("open blob %s: %w", d, err)
	}
	report := func(err error) {
		s.logger.Error("s3 blob store: corrupt blob", "digest", d.String(), "key", key, "err", err)
	}
	if m, ok := info.UserMetadata[metaDigest]; ok && m != d.String() {
		body.Close()
		err := fmt.Errorf("%w: blob %s: object's metadata says %s", blobstore.ErrCorrupt, d, m)
		report(err)
		return nil, 0, err
	}
	return blobstore.VerifyingReader(ctx, body, d, info.Size, report), info.Size, nil
}

// Stat implements blobstore.Store.
func (s *Store) Stat(ctx context.Context, d blobstore.Digest) (blobstore.Info, error) {
	if d.IsZero() {
		return blobstore.Info{}, fmt.Errorf("stat blob: zero digest")
	}
	info, err := s.core.StatObject(ctx, s.bucket, s.Key(d), minio.StatObjectOptions{})
	if err != nil {
		if notFound(err) {
			return blobstore.Info{}, fmt.Errorf("%w: %s", blobstore.ErrNotFound, d)
		}
		if ctx.Err() != nil {
			return blobstore.Info{}, ctx.Err()
		}
		return blobstore.Info{}, fmt.Errorf("stat blob %s: %w", d, err)
	}
	return blobstore.Info{Digest: d, Size: info.Size}, nil
}

// Delete implements blobstore.Store. (S3's DELETE succeeds on a missing
// key, so Delete asks first; a concurrent Delete may still make both
// succeed.)
func (s *Store) Delete(ctx context.Context, d blobstore.Digest) error {
	if _, err := s.Stat(ctx, d); err != nil {
		return err
	}
	if err := s.core.RemoveObject(ctx, s.bucket, s.Key(d), minio.RemoveObjectOptions{}); err != nil {
		if notFound(err) { // removed meanwhile by a concurrent Delete
			return fmt.Errorf("%w: %s", blobstore.ErrNotFound, d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("delete blob %s: %w", d, err)
	}
	return nil
}

// List implements blobstore.Store. Objects under the blob prefix whose keys
// are not digests are skipped with a warning.
func (s *Store) List(ctx context.Context) iter.Seq2[blobstore.Info, error] {
	return func(yield func(blobstore.Info, error) bool) {
		// The listing stops with the context; cancel it if the caller stops early.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		prefix := s.blobPrefix()
		for obj := range s.core.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil {
				yield(blobstore.Info{}, fmt.Errorf("list blobs: %w", obj.Err))
				return
			}
			d, err := blobstore.ParseDigest(blobstore.Algorithm + ":" + strings.TrimPrefix(obj.Key, prefix))
			if err != nil {
				s.logger.Warn("s3 blob store: stray object among blobs", "key", obj.Key)
				continue
			}
			if !yield(blobstore.Info{Digest: d, Size: obj.Size}, nil) {
				return
			}
		}
		if err := ctx.Err(); err != nil {
			yield(blobstore.Info{}, err)
		}
	}
}

// IncompleteUploads lists the keys of multipart uploads in progress (or
// left over) under the store's prefix. The conformance suite checks that a
// refused or cancelled Put leaves none.
func (s *Store) IncompleteUploads(ctx context.Context) ([]string, error) {
	res, err := s.core.ListMultipartUploads(ctx, s.bucket, s.prefix, "", "", "", 1000)
	if err != nil {
		return nil, fmt.Errorf("list multipart uploads: %w", err)
	}
	var keys []string
	for _, u := range res.Uploads {
		keys = append(keys, u.Key+" (upload "+u.UploadID+")")
	}
	return keys, nil
}
