// Package snapblob moves a saved snapshot's directory (what a runtime's
// live snapshot wrote: runsc's checkpoint image, the copied upper layer or
// disk image, its manifest) between a node and the shared blob store, so
// that another node can start sandboxes from it.
//
// A snapshot travels as a deterministic tar stream of its directory
// (owners, modes, times, extended attributes, hard links, device nodes
// such as overlay whiteouts, symlinks; sockets are left out) cut into
// chunks of ChunkSize bytes, each a content-addressed blob, and a manifest
// blob listing the chunks in order. Identical chunks are one blob: two
// snapshots of one sandbox, or the zero-filled holes of a disk image, share
// them. Every blob starts with a header naming what it is, so a snapshot's
// blob can never be the same blob as a template's (whose manifests are
// JSON and archives tar): deleting a snapshot's blobs never deletes a
// template's.
//
// Push writes the chunks and the manifest, then claims them (the caller's
// claim, which records them for the snapshot in the store) and checks that
// each is still there (a deletion of another snapshot's shared blob may
// have removed it between the write and the claim; a retried push writes
// it again). Pull reads the manifest and each chunk in full, so that the
// blob store's digest check is done before any byte is used, and unpacks
// the stream into a new directory; regular files are written sparsely (a
// zero block is a hole).
package snapblob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/model"
)

// ChunkSize is the size of a snapshot's chunks (the last is shorter).
const ChunkSize = 4 << 20

// Blob headers: the first bytes of every blob this package writes.
const (
	chunkHeader    = "airlock-snapshot-chunk/1\n"
	manifestHeader = "airlock-snapshot-manifest/1\n"
	manifestFormat = "airlock-snapshot-tar/1"
)

// maxChunks bounds a manifest (1 TiB of snapshot in 4 MiB chunks).
const maxChunks = 1 << 18

// ErrCorrupt: what the blob store holds does not make the snapshot its
// manifest names (a blob that does not verify, a manifest or stream that
// does not parse). Nothing is left of the pull.
var ErrCorrupt = errors.New("snapshot blobs are corrupt")

// Manifest lists a snapshot's chunks, in the order of its tar stream.
type Manifest struct {
	Format string  `json:"format"`
	Size   int64   `json:"size"` // of the tar stream
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one blob of the stream: its digest and size (the header
// included).
type Chunk struct {
	Digest blobstore.Digest `json:"digest"`
	Size   int64            `json:"size"`
}

// Stats says what a push or a pull moved.
type Stats struct {
	Chunks  int           // chunks of the stream
	Reused  int           // chunks already in the blob store (push)
	Bytes   int64         // bytes of the tar stream
	Written int64         // bytes written to the blob store (push)
	Took    time.Duration // the whole push or pull
}

// Claim records, before a push is trusted, that the snapshot holds these
// blobs (store.SnapshotBlobs.ClaimSnapshotBlobs).
type Claim func(ctx context.Context, digests []model.BlobDigest) error

// Push writes the snapshot directory dir to blobs, claims its blobs with
// claim and returns its manifest's digest. A push that fails part way
// leaves blobs that a retried push reuses.
func Push(ctx context.Context, blobs blobstore.Store, dir string, claim Claim, log *slog.Logger) (blobstore.Digest, Stats, error) {
	start := time.Now()
	cw := &chunkWriter{ctx: ctx, blobs: blobs, buf: make([]byte, 0, ChunkSize)}
	if err := writeTree(ctx, dir, cw); err != nil {
		return blobstore.Digest{}, cw.stats, fmt.Errorf("push snapshot %s: %w", dir, err)
	}
	if err := cw.flush(); err != nil {
		return blobstore.Digest{}, cw.stats, fmt.Errorf("push snapshot %s: %w", dir, err)
	}
	m := Manifest{Format: manifestFormat, Size: cw.stats.Bytes, Chunks: cw.chunks}
	body, err := json.Marshal(m)
	if err != nil {
		return blobstore.Digest{}, cw.stats, err
	}
	mb := append([]byte(manifestHeader), body...)
	md := blobstore.FromBytes(mb)
	if err := blobs.Put(ctx, md, bytes.NewReader(mb), int64(len(mb))); err != nil {
		return blobstore.Digest{}, cw.stats, fmt.Errorf("push snapshot %s: manifest: %w", dir, err)
	}
	claimed := []model.BlobDigest{model.BlobDigest(md.String())}
	for _, c := range m.Chunks {
		claimed = append(claimed, model.BlobDigest(c.Digest.String()))
	}
	if err := claim(ctx, claimed); err != nil {
		return blobstore.Digest{}, cw.stats, fmt.Errorf("push snapshot %s: claim its blobs: %w", dir, err)
	}
	// Claimed: no deletion removes them from now on. One may have done
	// so before the claim.
	for _, d := range claimed {
		bd, err := blobstore.ParseDigest(string(d))
		if err != nil {
			return blobstore.Digest{}, cw.stats, err
		}
		if _, err := blobs.Stat(ctx, bd); err != nil {
			return blobstore.Digest{}, cw.stats, fmt.Errorf("push snapshot %s: blob %s after the claim: %w", dir, bd, err)
		}
	}
	cw.stats.Took = time.Since(start)
	if log != nil {
		log.InfoContext(ctx, "snapshot pushed", "dir", dir, "manifest", md, "chunks", cw.stats.Chunks, "reused", cw.stats.Reused,
			"bytes", cw.stats.Bytes, "written", cw.stats.Written, "took", cw.stats.Took.Round(time.Millisecond))
	}
	return md, cw.stats, nil
}

// chunkWriter cuts what is written into chunks and puts each in the blob
// store as soon as it is full.
type chunkWriter struct {
	ctx    context.Context
	blobs  blobstore.Store
	buf    []byte
	chunks []Chunk
	stats  Stats
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		take := min(len(p), ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p, n = p[take:], n+take
		if len(w.buf) == ChunkSize {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	data := append([]byte(chunkHeader), w.buf...)
	d := blobstore.FromBytes(data)
	w.stats.Chunks++
	w.stats.Bytes += int64(len(w.buf))
	w.buf = w.buf[:0]
	w.chunks = append(w.chunks, Chunk{Digest: d, Size: int64(len(data))})
	if _, err := w.blobs.Stat(w.ctx, d); err == nil {
		w.stats.Reused++
		return nil
	} else if !errors.Is(err, blobstore.ErrNotFound) {
		return fmt.Errorf("blob %s: %w", d, err)
	}
	if err := w.blobs.Put(w.ctx, d, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("put chunk %s: %w", d, err)
	}
	w.stats.Written += int64(len(data))
	return nil
}

// Pull unpacks the snapshot whose manifest is md from blobs into the new
// directory dst (its parent must exist). On error it removes what it
// wrote; a stream that does not verify wraps ErrCorrupt (and
// blobstore.ErrNotFound for a missing blob).
func Pull(ctx context.Context, blobs blobstore.Store, md blobstore.Digest, dst string, log *slog.Logger) (Stats, error) {
	start := time.Now()
	m, err := readManifest(ctx, blobs, md)
	if err != nil {
		return Stats{}, fmt.Errorf("pull snapshot manifest %s: %w", md, err)
	}
	cr := &chunkReader{ctx: ctx, blobs: blobs, chunks: m.Chunks}
	if err := readTree(ctx, cr, dst); err != nil {
		return Stats{}, fmt.Errorf("pull snapshot %s: %w", md, err)
	}
	if cr.n != m.Size {
		return Stats{}, fmt.Errorf("pull snapshot %s: %w: the stream has %d bytes, its manifest says %d", md, ErrCorrupt, cr.n, m.Size)
	}
	st := Stats{Chunks: len(m.Chunks), Bytes: m.Size, Took: time.Since(start)}
	if log != nil {
		log.InfoContext(ctx, "snapshot pulled", "manifest", md, "dir", dst, "chunks", st.Chunks, "bytes", st.Bytes,
			"took", st.Took.Round(time.Millisecond))
	}
	return st, nil
}

// readManifest reads, verifies and parses manifest blob md.
func readManifest(ctx context.Context, blobs blobstore.Store, md blobstore.Digest) (Manifest, error) {
	b, err := readBlob(ctx, blobs, md, 64<<20)
	if err != nil {
		return Manifest{}, err
	}
	body, ok := bytes.CutPrefix(b, []byte(manifestHeader))
	if !ok {
		return Manifest{}, fmt.Errorf("%w: blob %s is not a snapshot manifest", ErrCorrupt, md)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest %s: %w", ErrCorrupt, md, err)
	}
	if m.Format != manifestFormat || len(m.Chunks) > maxChunks || m.Size < 0 {
		return Manifest{}, fmt.Errorf("%w: manifest %s: format %q, %d chunks", ErrCorrupt, md, m.Format, len(m.Chunks))
	}
	for _, c := range m.Chunks {
		if c.Digest.IsZero() || c.Size <= int64(len(chunkHeader)) || c.Size > ChunkSize+int64(len(chunkHeader)) {
			return Manifest{}, fmt.Errorf("%w: manifest %s: chunk %s of %d bytes", ErrCorrupt, md, c.Digest, c.Size)
		}
	}
	return m, nil
}

// readBlob reads blob d in full (at most limit bytes); the blob store's
// reader verifies its digest at the end, so what it returns is the blob.
func readBlob(ctx context.Context, blobs blobstore.Store, d blobstore.Digest, limit int64) ([]byte, error) {
	rc, size, err := blobs.Open(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d, err)
	}
	defer rc.Close()
	if size > limit {
		return nil, fmt.Errorf("%w: blob %s has %d bytes, more than %d", ErrCorrupt, d, size, limit)
	}
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if errors.Is(err, blobstore.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d, err)
	}
	return b, nil
}

// chunkReader is the stream of a manifest's chunks, each read in full and
// verified before any of it is returned.
type chunkReader struct {
	ctx    context.Context
	blobs  blobstore.Store
	chunks []Chunk
	cur    []byte
	n      int64
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if len(r.chunks) == 0 {
			return 0, io.EOF
		}
		c := r.chunks[0]
		r.chunks = r.chunks[1:]
		b, err := readBlob(r.ctx, r.blobs, c.Digest, c.Size)
		if err != nil {
			return 0, err
		}
		data, ok := bytes.CutPrefix(b, []byte(chunkHeader))
		if !ok || int64(len(b)) != c.Size {
			return 0, fmt.Errorf("%w: blob %s is not a snapshot chunk of %d bytes", ErrCorrupt, c.Digest, c.Size)
		}
		r.cur = data
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.n += int64(n)
	return n, nil
}
