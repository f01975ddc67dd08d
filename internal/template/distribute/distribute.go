// Package distribute moves templates between a node's template store and a
// blob store shared by several nodes (a directory or an S3 bucket; see
// internal/blobstore).
//
// A template travels as two blobs and one link:
//
//   - its canonical manifest, stored as a blob, so the blob's digest is
//     the template digest;
//   - its tree as a deterministic tar archive (template.WriteArchive),
//     with extended attributes and hard links, as a second blob;
//   - the link of kind "template-archive" from the manifest's digest to the
//     archive's (a manifest cannot name the archive of its own tree).
//
// Publish pushes a local template (archive, manifest, then link, so a node
// that finds the link finds both blobs). Fetch pulls one by digest into
// the local store: it reads the manifest blob and the archive the link
// names (the blob store verifies both digests as they are read), imports
// the archive through the tar import path, and publishes the template only
// if it hashes to the digest asked for. Anything else is reported as
// corrupt (template.ErrCorrupt) and nothing is served.
package distribute

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/airlockdev/airlock/internal/blobstore"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/template"
)

// ArchiveLink is the kind of link from a template's manifest blob to its
// tree archive blob.
var ArchiveLink = func() blobstore.LinkKind {
	k, err := blobstore.ParseLinkKind("template-archive")
	if err != nil {
		panic(err)
	}
	return k
}()

// maxManifest bounds how much of a manifest blob Fetch reads.
const maxManifest = 4 << 20

// Config configures a Distributor.
type Config struct {
	Templates *template.Store
	// Blobs is the shared blob store; it must keep links
	// (blobstore.Linker), as diskstore, s3store and pullthrough do.
	Blobs blobstore.Store
	// TempDir holds archives while they are written and pushed; "" is
	// os.TempDir(). Put it on a disk, not a tmpfs: archives are as large
	// as the templates.
	TempDir string
	Logger  *slog.Logger
}

// Distributor publishes and fetches templates. It is safe for concurrent
// use; concurrent Fetches of one digest pull it once.
type Distributor struct {
	cfg   Config
	links blobstore.Linker
	log   *slog.Logger

	mu      sync.Mutex
	fetches map[model.TemplateDigest]*fetch
}

type fetch struct {
	done chan struct{}
	imp  template.Imported
	err  error
}

// New returns a Distributor.
func New(cfg Config) (*Distributor, error) {
	if cfg.Templates == nil || cfg.Blobs == nil {
		return nil, errors.New("distribute: a template store and a blob store are required")
	}
	links, ok := cfg.Blobs.(blobstore.Linker)
	if !ok {
		return nil, fmt.Errorf("distribute: blob store %T keeps no links", cfg.Blobs)
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Distributor{cfg: cfg, links: links, log: cfg.Logger, fetches: map[model.TemplateDigest]*fetch{}}, nil
}

// Blobs returns the shared blob store the distributor uses (saved
// snapshots are kept in it too: internal/snapblob).
func (d *Distributor) Blobs() blobstore.Store { return d.cfg.Blobs }

// Publish pushes local template d to the blob store and returns the digest
// of its tree archive. A template already there (its link and both blobs
// present) is not archived again.
func (d *Distributor) Publish(ctx context.Context, digest model.TemplateDigest) (blobstore.Digest, error) {
	manifest, err := d.cfg.Templates.Manifest(digest) // checks that it hashes to digest
	if err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: %w", digest, err)
	}
	md, err := blobstore.FromTemplateDigest(digest)
	if err != nil {
		return blobstore.Digest{}, err
	}
	if a, err := d.links.GetLink(ctx, ArchiveLink, md); err == nil {
		_, aerr := d.cfg.Blobs.Stat(ctx, a)
		_, merr := d.cfg.Blobs.Stat(ctx, md)
		if aerr == nil && merr == nil {
			return a, nil
		}
	}
	start := time.Now()
	f, err := os.CreateTemp(d.cfg.TempDir, "template-archive-*")
	if err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: %w", digest, err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	h := sha256.New()
	if err := d.cfg.Templates.WriteArchive(ctx, digest, io.MultiWriter(f, h)); err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: %w", digest, err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: %w", digest, err)
	}
	archive := blobstore.FromSHA256([sha256.Size]byte(h.Sum(nil)))
	if err := d.cfg.Blobs.Put(ctx, archive, f, size); err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: push archive: %w", digest, err)
	}
	if err := d.cfg.Blobs.Put(ctx, md, bytes.NewReader(manifest), int64(len(manifest))); err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: push manifest: %w", digest, err)
	}
	if err := d.links.PutLink(ctx, ArchiveLink, md, archive); err != nil {
		return blobstore.Digest{}, fmt.Errorf("publish template %s: %w", digest, err)
	}
	d.log.InfoContext(ctx, "template published", "digest", digest, "archive", archive, "archive_bytes", size,
		"duration", time.Since(start).Round(time.Millisecond))
	return archive, nil
}

// Fetch makes template digest present in the local store, pulling it from
// the blob store if it is not there, and returns it (Reused if it was
// there already). A template the blob store lacks is an
// error wrapping template.ErrNotFound (and blobstore.ErrNotFound); one whose
// blobs do not verify or do not make that template wraps
// template.ErrCorrupt, and nothing is published.
func (d *Distributor) Fetch(ctx context.Context, digest model.TemplateDigest) (template.Imported, error) {
	if _, err := model.ParseTemplateDigest(string(digest)); err != nil {
		return template.Imported{}, err
	}
	if d.cfg.Templates.Has(digest) {
		return d.cfg.Templates.Get(digest)
	}
	d.mu.Lock()
	f, running := d.fetches[digest]
	if !running {
		f = &fetch{done: make(chan struct{})}
		d.fetches[digest] = f
	}
	d.mu.Unlock()
	if running {
		select {
		case <-f.done:
			return f.imp, f.err
		case <-ctx.Done():
			return template.Imported{}, ctx.Err()
		}
	}
	f.imp, f.err = d.pull(ctx, digest)
	d.mu.Lock()
	delete(d.fetches, digest)
	d.mu.Unlock()
	close(f.done)
	return f.imp, f.err
}

func (d *Distributor) pull(ctx context.Context, digest model.TemplateDigest) (template.Imported, error) {
	start := time.Now()
	md, err := blobstore.FromTemplateDigest(digest)
	if err != nil {
		return template.Imported{}, err
	}
	manifest, err := d.readManifest(ctx, md)
	if err != nil {
		return template.Imported{}, pullError(digest, err)
	}
	archive, err := d.links.GetLink(ctx, ArchiveLink, md)
	if err != nil {
		return template.Imported{}, pullError(digest, fmt.Errorf("its tree archive: %w", err))
	}
	rc, size, err := d.cfg.Blobs.Open(ctx, archive)
	if err != nil {
		return template.Imported{}, pullError(digest, fmt.Errorf("tree archive %s: %w", archive, err))
	}
	defer rc.Close()
	imp, err := d.cfg.Templates.ImportArchive(ctx, rc, digest, manifest, nil)
	if err != nil {
		return template.Imported{}, pullError(digest, fmt.Errorf("tree archive %s: %w", archive, err))
	}
	d.log.InfoContext(ctx, "template pulled", "digest", digest, "archive", archive, "archive_bytes", size,
		"reused", imp.Reused, "duration", time.Since(start).Round(time.Millisecond))
	return imp, nil
}

func (d *Distributor) readManifest(ctx context.Context, md blobstore.Digest) ([]byte, error) {
	rc, size, err := d.cfg.Blobs.Open(ctx, md)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer rc.Close()
	if size > maxManifest {
		return nil, fmt.Errorf("manifest: %w: %d bytes", blobstore.ErrCorrupt, size)
	}
	b, err := io.ReadAll(rc) // to the end, where the reader verifies the digest
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return b, nil
}

// pullError wraps the template package's sentinel that matches err.
func pullError(digest model.TemplateDigest, err error) error {
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return fmt.Errorf("%w: %s is not in the blob store: %w", template.ErrNotFound, digest, err)
	case errors.Is(err, blobstore.ErrCorrupt) && !errors.Is(err, template.ErrCorrupt):
		return fmt.Errorf("%w: pull %s: %w", template.ErrCorrupt, digest, err)
	}
	return fmt.Errorf("pull template %s: %w", digest, err)
}
