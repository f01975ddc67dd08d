// Package blobstore is Airlock's content store: immutable blobs (template
// trees, snapshots) addressed by the SHA-256 of their bytes.
//
// A Store never trusts the bytes it is given or the bytes it has stored:
//
//   - Put verifies length and digest while it writes and publishes the blob
//     only when both match; a mismatch is refused with a *MismatchError
//     (errors.Is(err, ErrMismatch)) and leaves nothing behind.
//   - Open returns a reader that hashes what it returns and, at the end,
//     fails with ErrCorrupt instead of io.EOF if the stored bytes do not hash
//     to the digest. A consumer must therefore treat what it has read as
//     untrusted until Read has returned io.EOF.
//
// Implementations: diskstore (a local directory), s3store (an S3-compatible
// bucket) and pullthrough (a local store in front of a shared remote one).
// blobstoretest is the conformance suite that all of them pass.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
)

// Errors. Implementations wrap them with %w, so test with errors.Is.
var (
	// ErrNotFound: the store has no blob with that digest.
	ErrNotFound = errors.New("blob not found")
	// ErrCorrupt: a stored blob does not hash to its digest (or has the
	// wrong length). It is never served as good data.
	ErrCorrupt = errors.New("blob corrupt")
	// ErrMismatch: the bytes given to Put do not match the expected digest
	// or size. The concrete error is a *MismatchError.
	ErrMismatch = errors.New("blob does not match its expected digest or size")
)

// MismatchError says how the bytes given to Put differ from what the caller
// said they were. Got is the zero Digest when it was not computed (the input
// was longer than expected and reading stopped there).
type MismatchError struct {
	Want     Digest
	WantSize int64
	Got      Digest
	GotSize  int64 // -1: more than WantSize
}

func (e *MismatchError) Error() string {
	switch {
	case e.GotSize < 0:
		return fmt.Sprintf("blob %s: input is longer than the expected %d bytes", e.Want, e.WantSize)
	case e.GotSize != e.WantSize:
		return fmt.Sprintf("blob %s: input has %d bytes, expected %d", e.Want, e.GotSize, e.WantSize)
	case e.Got.IsZero():
		return fmt.Sprintf("blob %s: input does not match the expected %d bytes", e.Want, e.WantSize)
	default:
		return fmt.Sprintf("blob %s: input hashes to %s", e.Want, e.Got)
	}
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// Info describes a stored blob.
type Info struct {
	Digest Digest
	Size   int64
}

// Store is a content-addressed blob store. Implementations are safe for
// concurrent use, also by several processes (or nodes) sharing the storage:
// concurrent Puts of one digest all succeed and leave one blob.
type Store interface {
	// Put stores the size bytes read from r as the blob d. It reads r to
	// the end (at most size+1 bytes), verifying length and digest as it
	// writes, and publishes the blob atomically only if both match;
	// otherwise it returns a *MismatchError and leaves nothing. If the blob
	// is already stored with that size, Put returns nil without reading r.
	// If ctx ends first, Put returns ctx's error and leaves nothing.
	Put(ctx context.Context, d Digest, r io.Reader, size int64) error
	// Open returns a reader of blob d and its size. The reader verifies
	// the digest as it is read: at the end it returns an error wrapping
	// ErrCorrupt instead of io.EOF if the content does not match. ctx
	// bounds the reads as well as the opening. Close the reader.
	Open(ctx context.Context, d Digest) (io.ReadCloser, int64, error)
	// Stat returns the size of blob d, or an error wrapping ErrNotFound.
	// It does not read the content.
	Stat(ctx context.Context, d Digest) (Info, error)
	// Delete removes blob d, or returns an error wrapping ErrNotFound.
	// Readers already open may go on reading.
	Delete(ctx context.Context, d Digest) error
	// List yields every stored blob, in no particular order, for garbage
	// collection. A non-nil error ends the listing.
	List(ctx context.Context) iter.Seq2[Info, error]
}
