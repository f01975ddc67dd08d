package template

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// Clone imports template d of src, another store on this host, without
// copying its content where it can: on one filesystem every regular file of
// the new tree is a hard link to src's inode (a store never modifies a
// tree after publishing it, nor does anything that uses one: sandboxes
// see it read-only, as an overlay's lower layer or an idmapped view), so
// the clone costs directories and links, not bytes. On another filesystem
// the files are copied (as ImportDir does). Either way the tree is digested
// and published only if it and src's manifest make template d; otherwise
// nothing is published and the error wraps ErrCorrupt. Reused is set when
// s holds d already.
func (s *Store) Clone(ctx context.Context, src *Store, d model.TemplateDigest) (Imported, error) {
	if s.Has(d) {
		return s.Get(d)
	}
	manifest, err := src.Manifest(d) // hashes to d
	if err != nil {
		return Imported{}, err
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return Imported{}, fmt.Errorf("%w: manifest of %s: %w", ErrCorrupt, d, err)
	}
	what := "clone of " + d.String() + " from " + src.Dir()
	return s.importChecked(ctx, nil, m.Config, what, d, func(ctx context.Context, stg *stager) error {
		return s.fillFromDir(ctx, stg, src.RootfsDir(d), true, nil)
	})
}

// link makes regular file rel a hard link to walk entry e's inode, in
// another tree on the same filesystem (unix.EXDEV otherwise): its content,
// owner, mode and extended attributes are that inode's, and nothing of it
// is changed here (it is shared).
func (s *stager) link(e *walkEntry, m meta) error {
	if err := m.check(e.rel); err != nil {
		return err
	}
	size := e.st.Size
	if size > s.limits.MaxBytes-s.bytes {
		return tooLargef("%s: %d bytes would exceed the limit of %d bytes in total", e.rel, size, s.limits.MaxBytes)
	}
	if _, err := s.prepare(e.rel, kindFile); err != nil {
		return err
	}
	dir, base, err := s.openParent(e.rel)
	if err != nil {
		return err
	}
	if err := unix.Linkat(e.dirFd, e.name, int(dir.Fd()), base, 0); err != nil {
		if err == unix.EXDEV {
			s.entries-- // counted by prepare; the copy counts it again
			return err
		}
		return fmt.Errorf("link %s: %w", e.rel, err)
	}
	s.kinds[e.rel] = kindFile
	s.bytes += size
	s.progress.report(s.entries, s.bytes, false)
	return nil
}
