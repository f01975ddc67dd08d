package blobstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Input is what an implementation of Put reads instead of the caller's
// reader: it passes through exactly the expected number of bytes, hashing
// them, and checks ctx before each read. Read returns a *MismatchError (never
// io.EOF) if the input is shorter or longer than expected or does not hash to
// the expected digest, and io.EOF only after all of it matched; Finish
// performs the same final check for a caller that stops reading at exactly
// the expected size. An implementation publishes a blob only after Read has
// returned io.EOF or Finish has returned nil.
type Input struct {
	ctx  context.Context
	r    io.Reader
	want Digest
	size int64
	h    hash.Hash
	n    int64
	done bool
	err  error // sticky final result
}

// NewInput wraps the caller's reader r of a Put of blob d of size bytes.
func NewInput(ctx context.Context, r io.Reader, d Digest, size int64) *Input {
	return &Input{ctx: ctx, r: r, want: d, size: size, h: sha256.New()}
}

// Read implements io.Reader.
func (in *Input) Read(p []byte) (int, error) {
	if in.done {
		if in.err != nil {
			return 0, in.err
		}
		return 0, io.EOF
	}
	if err := in.ctx.Err(); err != nil {
		return 0, err
	}
	if in.n == in.size {
		if err := in.Finish(); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	if rest := in.size - in.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := in.r.Read(p)
	in.h.Write(p[:n])
	in.n += int64(n)
	switch {
	case errors.Is(err, io.EOF) && in.n < in.size:
		in.done = true
		in.err = &MismatchError{Want: in.want, WantSize: in.size, GotSize: in.n}
		return n, in.err
	case errors.Is(err, io.EOF):
		err = nil // Finish decides at the next Read
	case err != nil:
		return n, fmt.Errorf("read blob input: %w", err)
	}
	return n, err
}

// Finish checks, once all size bytes were read, that the input ends there
// and hashes to the expected digest. It returns a *MismatchError otherwise.
func (in *Input) Finish() error {
	if in.done {
		return in.err
	}
	if in.n < in.size {
		return fmt.Errorf("blob %s: input finished after %d of %d bytes", in.want, in.n, in.size)
	}
	in.done = true
	n, err := readOneMore(in.r)
	if n > 0 {
		in.err = &MismatchError{Want: in.want, WantSize: in.size, GotSize: -1}
		return in.err
	}
	if err != nil {
		in.err = fmt.Errorf("read blob input: %w", err)
		return in.err
	}
	var sum [sha256.Size]byte
	in.h.Sum(sum[:0])
	if got := FromSHA256(sum); got != in.want {
		in.err = &MismatchError{Want: in.want, WantSize: in.size, Got: got, GotSize: in.size}
	}
	return in.err
}

// BytesRead returns how many bytes have passed through so far.
func (in *Input) BytesRead() int64 { return in.n }

// VerifyingReader returns a reader of the stored content rc of blob d, which
// the store says has size bytes. It returns at most size bytes, hashing them,
// and checks ctx before each read. At the end it returns io.EOF only if the
// content had exactly size bytes that hash to d; otherwise an error wrapping
// ErrCorrupt, after calling onCorrupt (if not nil) once with that error so
// the store can report the blob and take it out of service. Close closes rc.
func VerifyingReader(ctx context.Context, rc io.ReadCloser, d Digest, size int64, onCorrupt func(error)) io.ReadCloser {
	return &verifyingReader{ctx: ctx, rc: rc, want: d, size: size, h: sha256.New(), onCorrupt: onCorrupt}
}

type verifyingReader struct {
	ctx       context.Context
	rc        io.ReadCloser
	want      Digest
	size      int64
	h         hash.Hash
	n         int64
	final     error // io.EOF or the corruption, once known
	onCorrupt func(error)
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.final != nil {
		return 0, v.final
	}
	if err := v.ctx.Err(); err != nil {
		return 0, err
	}
	if v.n == v.size {
		return 0, v.finish()
	}
	if rest := v.size - v.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case errors.Is(err, io.EOF) && v.n < v.size:
		return n, v.corrupt(fmt.Errorf("%w: blob %s: content ends after %d of %d bytes", ErrCorrupt, v.want, v.n, v.size))
	case errors.Is(err, io.EOF):
		return n, nil // the next Read finishes
	case err != nil:
		return n, fmt.Errorf("read blob %s: %w", v.want, err)
	}
	return n, nil
}

func (v *verifyingReader) finish() error {
	n, err := readOneMore(v.rc)
	if n > 0 {
		return v.corrupt(fmt.Errorf("%w: blob %s: content is longer than its %d bytes", ErrCorrupt, v.want, v.size))
	}
	if err != nil {
		return fmt.Errorf("read blob %s: %w", v.want, err)
	}
	var sum [sha256.Size]byte
	v.h.Sum(sum[:0])
	if got := FromSHA256(sum); got != v.want {
		return v.corrupt(fmt.Errorf("%w: blob %s: content hashes to %s", ErrCorrupt, v.want, got))
	}
	v.final = io.EOF
	return io.EOF
}

func (v *verifyingReader) corrupt(err error) error {
	v.final = err
	if v.onCorrupt != nil {
		v.onCorrupt(err)
		v.onCorrupt = nil
	}
	return err
}

func (v *verifyingReader) Close() error { return v.rc.Close() }

// readOneMore reads one byte past the expected end of r: (1, nil) if there
// is more, (0, nil) at io.EOF, or the error that prevented knowing.
func readOneMore(r io.Reader) (int, error) {
	var one [1]byte
	for range 100 {
		n, err := r.Read(one[:])
		if n > 0 {
			return 1, nil
		}
		if errors.Is(err, io.EOF) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
	}
	return 0, io.ErrNoProgress
}
