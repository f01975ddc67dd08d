// Package blobstoretest is the conformance suite of blobstore.Store: every
// implementation runs Run with a Harness that makes fresh stores of its kind
// and can tamper with their stored bytes behind their back.
package blobstoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
)

// Harness adapts one implementation to the suite.
type Harness struct {
	// New returns a fresh, empty store whose resources end with t.
	New func(t *testing.T) blobstore.Store
	// Tamper replaces the stored bytes of blob d in s with content, behind
	// the store's back (as a failing disk or a careless operator would).
	Tamper func(t *testing.T, s blobstore.Store, d blobstore.Digest, content []byte)
	// Leftovers lists what a failed Put could leave behind in s (temporary
	// files, incomplete multipart uploads). The suite expects none.
	Leftovers func(t *testing.T, s blobstore.Store) []string
	// BigSize is the size of the streamed big blob (default 64 MiB).
	BigSize int64
	// MaxHeapGrowth bounds how far the heap may grow while the big blob is
	// put and read back (default 3/4 of BigSize): the blob must stream.
	MaxHeapGrowth int64
}

// Run runs the whole suite. Its subtests run one after another, so that the
// big blob's heap measurement sees only itself.
func Run(t *testing.T, h Harness) {
	if h.BigSize == 0 {
		h.BigSize = 64 << 20
	}
	if h.MaxHeapGrowth == 0 {
		h.MaxHeapGrowth = h.BigSize * 3 / 4
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"RoundTrip", testRoundTrip},
		{"PutExistingIsNoOp", testPutExisting},
		{"WrongDigestRefused", testWrongDigest},
		{"SizeMismatchRefused", testSizeMismatch},
		{"NotFound", testNotFound},
		{"CorruptDetected", testCorrupt},
		{"Delete", testDelete},
		{"List", testList},
		{"ConcurrentPutSameBlob", testConcurrentPut},
		{"ConcurrentPutDelete", testConcurrentPutDelete},
		{"CancelMidWriteLeavesNothing", testCancelMidWrite},
		{"CancelWhileReading", testCancelRead},
		{"BigBlobStreams", testBig},
		{"Links", testLinks},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// content returns n deterministic pseudo-random bytes for seed.
func content(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func put(t *testing.T, s blobstore.Store, b []byte) blobstore.Digest {
	t.Helper()
	d := blobstore.FromBytes(b)
	if err := s.Put(ctx(t), d, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("Put %s (%d bytes): %v", d, len(b), err)
	}
	return d
}

// readAll opens d and reads it to the end, returning the bytes and the
// error that ended the read (nil after a clean io.EOF).
func readAll(t *testing.T, s blobstore.Store, d blobstore.Digest) ([]byte, int64, error) {
	t.Helper()
	rc, size, err := s.Open(ctx(t), d)
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return b, size, err
}

func expectAbsent(t *testing.T, h Harness, s blobstore.Store, d blobstore.Digest) {
	t.Helper()
	if _, err := s.Stat(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Stat %s after a refused Put: %v, want ErrNotFound", d, err)
	}
	for info, err := range s.List(ctx(t)) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if info.Digest == d {
			t.Errorf("List shows %s after a refused Put", d)
		}
	}
	if h.Leftovers != nil {
		if left := h.Leftovers(t, s); len(left) > 0 {
			t.Errorf("a refused Put left %v", left)
		}
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	s := h.New(t)
	for _, n := range []int{0, 1, 4095, 4096, 1<<20 + 17} {
		b := content(uint64(n), n)
		d := put(t, s, b)
		if want := sha256.Sum256(b); d != blobstore.FromSHA256(want) {
			t.Fatalf("digest %s", d)
		}
		info, err := s.Stat(ctx(t), d)
		if err != nil || info.Size != int64(n) || info.Digest != d {
			t.Fatalf("Stat %d-byte blob: %+v, %v", n, info, err)
		}
		got, size, err := readAll(t, s, d)
		if err != nil || size != int64(n) || !bytes.Equal(got, b) {
			t.Fatalf("read back %d-byte blob: size %d, %d bytes, equal %v, err %v", n, size, len(got), bytes.Equal(got, b), err)
		}
	}
}

func testPutExisting(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(1, 1000)
	d := put(t, s, b)
	if err := s.Put(ctx(t), d, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("second Put: %v", err)
	}
	err := s.Put(ctx(t), d, bytes.NewReader(b[:10]), 10)
	var me *blobstore.MismatchError
	if !errors.Is(err, blobstore.ErrMismatch) || !errors.As(err, &me) {
		t.Fatalf("Put of a stored digest with another size: %v, want a *MismatchError", err)
	}
	if got, _, err := readAll(t, s, d); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("blob changed: %v", err)
	}
}

func testWrongDigest(t *testing.T, h Harness) {
	s := h.New(t)
	for _, n := range []int{0, 10, 3 << 20, 17<<20 + 1} { // the last one past a 16 MiB part
		b := content(2, n)
		other := blobstore.FromBytes(append(slices.Clone(b), 'x'))
		err := s.Put(ctx(t), other, bytes.NewReader(b), int64(n))
		var me *blobstore.MismatchError
		if !errors.Is(err, blobstore.ErrMismatch) || !errors.As(err, &me) {
			t.Fatalf("Put of %d bytes under a wrong digest: %v, want a *MismatchError", n, err)
		}
		if me.Want != other || me.Got != blobstore.FromBytes(b) || me.GotSize != int64(n) {
			t.Errorf("mismatch error %+v", me)
		}
		expectAbsent(t, h, s, other)
		expectAbsent(t, h, s, blobstore.FromBytes(b))
	}
}

func testSizeMismatch(t *testing.T, h Harness) {
	b := content(3, 5000)
	big := content(3, 17<<20+1) // past a 16 MiB part
	tests := []struct {
		name     string
		blob     []byte
		input    []byte
		size     int64
		wantSize int64 // MismatchError.GotSize
	}{
		{"InputShorter", b, b[:4000], 5000, 4000},
		{"InputLonger", b, append(slices.Clone(b), "more"...), 5000, -1},
		{"SizeTooSmall", b, b, 4999, -1},
		{"SizeTooLarge", b, b, 5001, 5000},
		{"EmptyInput", b, nil, 5000, 0},
		{"BigInputShorter", big, big[:17<<20], 17<<20 + 1, 17 << 20},
		{"BigInputLonger", big, append(slices.Clone(big), 0), 17<<20 + 1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := blobstore.FromBytes(tc.blob)
			s := h.New(t)
			err := s.Put(ctx(t), d, bytes.NewReader(tc.input), tc.size)
			var me *blobstore.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("Put: %v, want a *MismatchError", err)
			}
			if me.GotSize != tc.wantSize || me.WantSize != tc.size {
				t.Errorf("mismatch error %+v (%v)", me, me)
			}
			expectAbsent(t, h, s, d)
		})
	}
}

func testNotFound(t *testing.T, h Harness) {
	s := h.New(t)
	d := blobstore.FromBytes([]byte("never stored"))
	if _, _, err := s.Open(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Open: %v", err)
	}
	if _, err := s.Stat(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Stat: %v", err)
	}
	if err := s.Delete(ctx(t), d); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Delete: %v", err)
	}
	for info, err := range s.List(ctx(t)) {
		t.Errorf("List of an empty store yields %+v, %v", info, err)
	}
}

func testCorrupt(t *testing.T, h Harness) {
	b := content(4, 100_000)
	flipped := slices.Clone(b)
	flipped[50_000] ^= 1
	tests := []struct {
		name     string
		tampered []byte
	}{
		{"BitFlipped", flipped},
		{"Truncated", b[:99_999]},
		{"Extended", append(slices.Clone(b), 0)},
		{"Emptied", []byte{}},
		{"Replaced", content(5, 100_000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := h.New(t)
			d := put(t, s, b)
			h.Tamper(t, s, d, tc.tampered)
			got, _, err := readAll(t, s, d)
			if !errors.Is(err, blobstore.ErrCorrupt) {
				t.Fatalf("reading a tampered blob ended with %v, want ErrCorrupt", err)
			}
			if bytes.Equal(got, tc.tampered) && len(got) > 0 && err == nil {
				t.Fatal("tampered content served as good")
			}
		})
	}
}

func testDelete(t *testing.T, h Harness) {
	s := h.New(t)
	keep := put(t, s, content(6, 100))
	gone := put(t, s, content(7, 100))
	if err := s.Delete(ctx(t), gone); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, _, err := s.Open(ctx(t), gone); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Open after Delete: %v", err)
	}
	if err := s.Delete(ctx(t), gone); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := s.Stat(ctx(t), keep); err != nil {
		t.Errorf("Stat of the other blob: %v", err)
	}
	// Put again after Delete works.
	put(t, s, content(7, 100))
	if _, err := s.Stat(ctx(t), gone); err != nil {
		t.Errorf("Stat after Put again: %v", err)
	}
}

func testList(t *testing.T, h Harness) {
	s := h.New(t)
	want := map[blobstore.Digest]int64{}
	for i := range 40 {
		b := content(uint64(100+i), 10*i)
		want[put(t, s, b)] = int64(len(b))
	}
	got := map[blobstore.Digest]int64{}
	for info, err := range s.List(ctx(t)) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if _, dup := got[info.Digest]; dup {
			t.Errorf("List yields %s twice", info.Digest)
		}
		got[info.Digest] = info.Size
	}
	if len(got) != len(want) {
		t.Errorf("List yields %d blobs, want %d", len(got), len(want))
	}
	for d, size := range want {
		if gs, ok := got[d]; !ok || gs != size {
			t.Errorf("List: %s has size %d (listed %v), want %d", d, gs, ok, size)
		}
	}
	n := 0
	for range s.List(ctx(t)) {
		n++
		if n == 3 {
			break // stopping early must be safe
		}
	}
}

// parallel runs fn(i) for i in [0, n) on n goroutines started together.
func parallel(n int, fn func(i int)) {
	start := make(chan struct{})
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			fn(i)
		}()
	}
	close(start)
	for range n {
		<-done
	}
}

func testConcurrentPut(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(8, 6<<20)
	d := blobstore.FromBytes(b)
	errs := make([]error, 8)
	parallel(len(errs), func(i int) {
		errs[i] = s.Put(ctx(t), d, bytes.NewReader(b), int64(len(b)))
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d: %v", i, err)
		}
	}
	if got, _, err := readAll(t, s, d); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read back: %v", err)
	}
	n := 0
	for _, err := range s.List(ctx(t)) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("List yields %d blobs, want 1", n)
	}
	if h.Leftovers != nil {
		if left := h.Leftovers(t, s); len(left) > 0 {
			t.Errorf("concurrent Puts left %v", left)
		}
	}
}

func testConcurrentPutDelete(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(9, 200_000)
	d := blobstore.FromBytes(b)
	const rounds = 10
	errs := make([][]error, 4)
	parallel(len(errs), func(i int) {
		for range rounds {
			var err error
			if i%2 == 0 {
				err = s.Put(ctx(t), d, bytes.NewReader(b), int64(len(b)))
			} else if err = s.Delete(ctx(t), d); errors.Is(err, blobstore.ErrNotFound) {
				err = nil
			}
			errs[i] = append(errs[i], err)
		}
	})
	for i, es := range errs {
		for _, err := range es {
			if err != nil {
				t.Errorf("goroutine %d: %v", i, err)
			}
		}
	}
	// Whatever the interleaving, the blob is either absent or intact.
	got, _, err := readAll(t, s, d)
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
	case err != nil:
		t.Fatalf("read after concurrent Put/Delete: %v", err)
	case !bytes.Equal(got, b):
		t.Fatal("read after concurrent Put/Delete: wrong bytes")
	}
	put(t, s, b)
	if got, _, err := readAll(t, s, d); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read after a final Put: %v", err)
	}
	if h.Leftovers != nil {
		if left := h.Leftovers(t, s); len(left) > 0 {
			t.Errorf("concurrent Put/Delete left %v", left)
		}
	}
}

// cancellingReader yields a stream and cancels its context after at bytes,
// then goes on yielding: the store must notice the context on its own.
type cancellingReader struct {
	r      io.Reader
	n, at  int64
	cancel context.CancelFunc
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n >= c.at {
		c.cancel()
	}
	return n, err
}

func testCancelMidWrite(t *testing.T, h Harness) {
	sizes := []struct {
		name     string
		size, at int64
	}{
		{"Small", 1 << 20, 512 << 10},
		{"Large", 40 << 20, 20 << 20}, // past the first part of a multipart upload
	}
	for _, tc := range sizes {
		t.Run(tc.name, func(t *testing.T) {
			s := h.New(t)
			d, src := stream(tc.size, 10)
			c, cancel := context.WithCancel(ctx(t))
			defer cancel()
			err := s.Put(c, d, &cancellingReader{r: src(), at: tc.at, cancel: cancel}, tc.size)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put cancelled midway: %v, want context.Canceled", err)
			}
			expectAbsent(t, h, s, d)
		})
	}
}

func testCancelRead(t *testing.T, h Harness) {
	s := h.New(t)
	d := put(t, s, content(11, 1<<20))
	c, cancel := context.WithCancel(ctx(t))
	rc, _, err := s.Open(c, d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
}

// stream returns the digest of a deterministic pseudo-random stream of size
// bytes and a function that starts the stream anew. Nothing holds it whole.
func stream(size int64, seed byte) (blobstore.Digest, func() io.Reader) {
	src := func() io.Reader {
		var s [32]byte
		s[0] = seed
		return io.LimitReader(rand.NewChaCha8(s), size)
	}
	h := sha256.New()
	_, _ = io.Copy(h, src())
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return blobstore.FromSHA256(sum), src
}
