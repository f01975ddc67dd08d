package template

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// OCI layer whiteouts (image-spec layer.md).
const (
	whiteoutPrefix     = ".wh."
	whiteoutMetaPrefix = ".wh..wh."
	whiteoutOpaque     = ".wh..wh..opq"
)

// layerEntryOverhead bounds the tar bytes of one entry besides its content
// (header, PAX records, padding) when sizing the layer stream budget.
const layerEntryOverhead = 8 << 10

// layerApplier applies an image's layers, lowest first, to a stager. Every
// entry goes through the stager and its checks; on top of them it handles
// whiteouts, opaque directories, changes of an entry's type and extended
// attributes, and bounds the bytes read from the layers.
type layerApplier struct {
	stg *stager
	// budget is how many more uncompressed layer bytes may be read, over
	// all layers: the store's MaxBytes plus layerEntryOverhead per entry
	// allowed. It bounds the work a layer can cause with data that never
	// becomes part of the tree (gzip bombs, trailing garbage, whiteouts).
	budget int64
	// touched holds the paths the current layer wrote, and their ancestors:
	// whiteouts and opaque directories hide only what lower layers made.
	touched map[string]bool
}

func newLayerApplier(stg *stager) *layerApplier {
	budget := stg.limits.MaxBytes
	if extra := int64(stg.limits.MaxEntries) * layerEntryOverhead; extra > math.MaxInt64-budget {
		budget = math.MaxInt64
	} else {
		budget += extra
	}
	return &layerApplier{stg: stg, budget: budget}
}

// applyLayer applies layer l whose uncompressed content must hash to
// diffID (the image config's rootfs.diff_ids entry).
func (a *layerApplier) applyLayer(ctx context.Context, l v1.Layer, compressedSize int64, diffID v1.Hash) error {
	if compressedSize > a.budget {
		return tooLargef("the layer is %d bytes compressed; the store's limits leave %d bytes for layers", compressedSize, a.budget)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return a.readError(ctx, err)
	}
	defer rc.Close()
	h := sha256.New()
	src := io.TeeReader(&budgetReader{r: ctxReader{ctx, rc}, left: &a.budget}, h)
	a.touched = map[string]bool{}
	if err := a.entries(ctx, tar.NewReader(src)); err != nil {
		return a.readError(ctx, err)
	}
	// Read to the very end: a compressed blob's digest is checked there,
	// and the diff ID covers everything after the tar end marker too.
	if _, err := io.Copy(io.Discard, src); err != nil {
		return a.readError(ctx, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); diffID.Algorithm != "sha256" || got != diffID.String() {
		return rejectf("the layer's content hashes to %s, but the image config says %s", got, diffID)
	}
	return nil
}

// readError classifies an error from reading a layer: exceeding the
// budget, a blob that does not match its digest and malformed or
// truncated tar or compressed data are invalid input; anything else (I/O,
// network) is returned as is.
func (a *layerApplier) readError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var sre *sourceReadError
	if errors.As(err, &sre) {
		err = sre.err
	}
	switch {
	case errors.Is(err, ErrTooLarge):
		return err
	case strings.Contains(err.Error(), "error verifying"):
		// go-containerregistry's digest and size check of a blob; its
		// error type is internal, its message is stable.
		return rejectf("the layer blob does not match its digest: %v", err)
	case errors.As(err, new(*entryError)):
		return err
	}
	return tarReadError(ctx, err)
}

// entryError marks an error about one entry (already classified), as
// opposed to one reading the stream.
type entryError struct{ err error }

func (e *entryError) Error() string { return e.err.Error() }
func (e *entryError) Unwrap() error { return e.err }

func (a *layerApplier) entries(ctx context.Context, tr *tar.Reader) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return &entryError{err}
		}
		if err := a.entry(ctx, name, hdr, tr); err != nil {
			var sre *sourceReadError
			if errors.As(err, &sre) || errors.Is(err, ErrTooLarge) || ctx.Err() != nil {
				return err
			}
			return &entryError{err}
		}
	}
}

func (a *layerApplier) entry(ctx context.Context, name string, hdr *tar.Header, r io.Reader) error {
	dir, base := path.Dir(name), path.Base(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(dir, base)
	}
	var k kind
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeLink:
		k = kindFile
	case tar.TypeDir:
		k = kindDir
	case tar.TypeSymlink:
		k = kindSymlink
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return rejectf("%s is a %s; templates may hold only regular files, directories, symlinks and hardlinks",
			name, tarTypeName(hdr.Typeflag))
	default:
		return rejectf("%s: unsupported tar entry type %q", name, hdr.Typeflag)
	}
	a.touch(name)
	// A layer may replace a lower layer's directory with a non-directory.
	if k != kindDir {
		old, err := a.stg.lookup(name)
		if err != nil {
			return err
		}
		if old == kindDir {
			if err := a.stg.remove(name); err != nil {
				return err
			}
		}
	}
	m := meta{mode: uint32(hdr.Mode) & 0o7777, uid: hdr.Uid, gid: hdr.Gid, mtime: hdr.ModTime}
	switch hdr.Typeflag {
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("%s: hardlink target: %w", name, err)
		}
		return a.stg.hardlink(name, target)
	case tar.TypeSymlink:
		return a.stg.symlink(name, hdr.Linkname, m)
	}
	xs, err := tarXattrs(name, hdr, k)
	if err != nil {
		return err
	}
	if k == kindDir {
		err = a.stg.dir(name, m)
	} else {
		err = a.stg.file(ctx, name, m, hdr.Size, r)
	}
	if err != nil {
		return err
	}
	return a.stg.setXattrs(name, xs)
}

// touch records that the current layer wrote rel (and so its ancestors).
func (a *layerApplier) touch(rel string) {
	a.touched[rel] = true
	for i := len(rel) - 1; i > 0; i-- {
		if rel[i] == '/' {
			a.touched[rel[:i]] = true
		}
	}
	a.touched["."] = true
}

// whiteout applies whiteout entry base in directory dir: ".wh.NAME" hides
// dir/NAME, ".wh..wh..opq" everything in dir, in both cases only what
// lower layers made. Other ".wh..wh." entries (AUFS metadata) are ignored,
// as container runtimes do.
func (a *layerApplier) whiteout(dir, base string) error {
	if err := a.stg.count(); err != nil { // whiteouts are work too
		return err
	}
	if base == whiteoutOpaque {
		k, err := a.stg.lookup(dir)
		if err != nil || k != kindDir {
			return err // a missing directory has no lower contents
		}
		a.touch(dir)
		names, err := a.stg.children(dir)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := a.hideLower(path.Join(dir, n)); err != nil {
				return err
			}
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutMetaPrefix) {
		return nil
	}
	target := base[len(whiteoutPrefix):]
	if target == "" || target == "." || target == ".." {
		return rejectf("%s: invalid whiteout %q", dir, base)
	}
	rel := path.Join(dir, target)
	k, err := a.stg.lookup(rel)
	if err != nil || k == 0 {
		return err
	}
	return a.hideLower(rel)
}

// hideLower removes what lower layers made at rel and below, keeping what
// the current layer wrote.
func (a *layerApplier) hideLower(rel string) error {
	if !a.touched[rel] {
		return a.stg.remove(rel)
	}
	names, err := a.stg.children(rel)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := a.hideLower(path.Join(rel, n)); err != nil {
			return err
		}
	}
	return nil
}

// budgetReader reads from r until *left bytes are used up, then fails
// with ErrTooLarge.
type budgetReader struct {
	r    io.Reader
	left *int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if *b.left < int64(len(p)) {
		p = p[:max(*b.left, 0)+1]
	}
	n, err := b.r.Read(p)
	*b.left -= int64(n)
	if *b.left < 0 {
		return n, tooLargef("the image's layers are larger than the store's limits allow")
	}
	return n, err
}
