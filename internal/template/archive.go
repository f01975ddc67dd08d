package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// Template archives: a template's tree as one tar stream, the form in which
// it travels through a blob store (internal/template/distribute).
//
// WriteArchive writes the tree in tree-digest order (depth first, names in
// byte order, the root first as "./"), in PAX format, with numeric owners
// only, modification times in whole seconds and no access or change times,
// so the same tree always gives the same bytes. Directories end in "/";
// a regular file whose inode was already written is a hard link entry to
// its first name; the extended attributes templates keep (xattr.go) are
// SCHILY.xattr records. File content is written in full: archive/tar cannot
// write sparse entries, so holes travel as zeros, and the importing stager
// turns aligned zero blocks back into holes.
//
// ImportArchive reads such an archive (any tar the tar import accepts)
// and publishes the template only if its digest is the one expected.

// WriteArchive writes template d's tree to w as a deterministic tar
// archive (see above). The tree is read as it is stored, not re-verified;
// the importing side checks the digest.
func (s *Store) WriteArchive(ctx context.Context, d model.TemplateDigest, w io.Writer) error {
	if !s.Has(d) {
		return fmt.Errorf("%w: %s", ErrNotFound, d)
	}
	tw := tar.NewWriter(w)
	links := map[inodeKey]string{}
	buf := make([]byte, 256<<10)
	err := walkTree(ctx, s.RootfsDir(d), func(e *walkEntry) error {
		st := &e.st
		hdr := &tar.Header{
			Name:    e.rel,
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: time.Unix(st.Mtim.Sec, 0),
			Format:  tar.FormatPAX,
		}
		k := kind(0)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name, k = tar.TypeDir, e.rel+"/", kindDir
			if e.rel == "." {
				hdr.Name = "./"
			}
		case unix.S_IFREG:
			key := inodeKey{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			if st.Nlink > 1 {
				links[key] = e.rel
			}
			hdr.Typeflag, hdr.Size, k = tar.TypeReg, st.Size, kindFile
		case unix.S_IFLNK:
			target, err := e.readlink()
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		default:
			return fmt.Errorf("%w: %s is a %s", ErrCorrupt, e.rel, fileTypeName(st.Mode))
		}
		xs, err := readKeptXattrs(e)
		if err != nil {
			return err
		}
		for _, x := range xs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords[paxXattrPrefix+x.name] = string(x.value)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("archive %s: %w", e.rel, err)
		}
		if k != kindFile {
			return nil
		}
		f, err := e.open()
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyBuffer(tw, ctxReader{ctx, io.LimitReader(f, st.Size)}, buf)
		if err != nil {
			return fmt.Errorf("archive %s: %w", e.rel, err)
		}
		if n != st.Size {
			return fmt.Errorf("%w: %s changed size while being archived", ErrCorrupt, e.rel)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive template %s: %w", d, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive template %s: %w", d, err)
	}
	return nil
}

// ImportArchive imports the tar archive read from r as the template whose
// canonical manifest is manifest: the tree is extracted as ImportTar does,
// r is read to its end (a verifying blob reader reports corruption only
// there), and the template is published only if the tree and manifest hash
// to want. Otherwise nothing is published and the error wraps ErrCorrupt.
func (s *Store) ImportArchive(ctx context.Context, r io.Reader, want model.TemplateDigest, manifest []byte,
	progress func(Progress)) (Imported, error) {
	if got := manifestDigest(manifest); got != want {
		return Imported{}, fmt.Errorf("%w: manifest of %s hashes to %s", ErrCorrupt, want, got)
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return Imported{}, fmt.Errorf("%w: manifest of %s: %w", ErrCorrupt, want, err)
	}
	what := "archive of " + want.String()
	imp, err := s.importChecked(ctx, progress, m.Config, what, want, func(ctx context.Context, stg *stager) error {
		cr := ctxReader{ctx, r}
		if err := extractTar(ctx, stg, tar.NewReader(cr)); err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, cr); err != nil { // to the end: the reader verifies there
			return fmt.Errorf("read archive: %w", err)
		}
		return nil
	})
	if err != nil && errors.Is(err, model.ErrInvalid) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
		// An archive that was pushed as a valid template cannot be invalid.
		return Imported{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return imp, err
}

// Get returns template d as the store holds it (Reused set), after
// checking that its manifest hashes to d; ErrNotFound if it is not here.
func (s *Store) Get(d model.TemplateDigest) (Imported, error) {
	imp, err := s.load(d)
	if err != nil {
		return Imported{}, err
	}
	imp.Reused = true
	return imp, nil
}
