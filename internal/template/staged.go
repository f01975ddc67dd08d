package template

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
	"github.com/airlockdev/airlock/internal/textclip"
)

// copyXattrs gives the entry the stager just made for walk entry e (a
// directory or regular file) e's kept extended attributes.
func copyXattrs(stg *stager, e *walkEntry) error {
	xs, err := readKeptXattrs(e)
	if err != nil {
		return err
	}
	for _, x := range xs {
		if err := x.check(e.rel); err != nil {
			return err
		}
	}
	if len(xs) > maxXattrs {
		return rejectf("%s: more than %d extended attributes", e.rel, maxXattrs)
	}
	if len(xs) == 0 {
		return nil
	}
	return stg.setXattrs(e.rel, xs)
}

// Staged is a private directory in the store's staging area in which a
// caller produces a tree in place (Rootfs) and then adopts it as a template
// without copying it (Adopt). Dir may hold the caller's own scratch
// directories beside it. A crashed process's Staged directories are removed
// by the next Open of the store.
type Staged struct {
	s  *Store
	st *staging
}

// NewStaged creates a staging directory. Call Remove when done.
func (s *Store) NewStaged() (*Staged, error) {
	st, err := s.newStaging()
	if err != nil {
		return nil, err
	}
	return &Staged{s: s, st: st}, nil
}

// Dir returns the staging directory; names other than "blob" and "lock"
// are free for the caller.
func (d *Staged) Dir() string { return d.st.dir }

// Rootfs returns the (initially empty, mode 0700) directory that Adopt
// turns into a template.
func (d *Staged) Rootfs() string { return d.st.rootfs() }

// Remove deletes the staging directory and everything left in it. The
// caller must have unmounted anything it mounted inside.
func (d *Staged) Remove() { d.st.remove(d.s.logger) }

// Adopt checks the tree in Rootfs as an import of a directory would (the
// store's limits; only directories, regular files, symlinks and hardlinks;
// owners in range; kept extended attributes well formed), drops the
// extended attributes templates do not keep, digests it and publishes it
// with runtime configuration cfg by renaming it into the store: no byte is
// copied. Rootfs is gone afterwards.
func (d *Staged) Adopt(ctx context.Context, cfg Config, what string) (Imported, error) {
	if err := d.checkTree(ctx); err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", what, err)
	}
	return d.s.publishStaged(ctx, d.st, cfg, what, "")
}

func (d *Staged) checkTree(ctx context.Context) error {
	limits := d.s.Limits()
	entries, bytes := 0, int64(0)
	seen := map[inodeKey]bool{}
	return walkTree(ctx, d.Rootfs(), func(e *walkEntry) error {
		entries++
		if entries > limits.MaxEntries {
			return tooLargef("more than %d entries", limits.MaxEntries)
		}
		if len(e.rel) > limits.MaxPathLen {
			return tooLargef("path %q is longer than %d bytes", textclip.Bytes(e.rel, maxEcho), limits.MaxPathLen)
		}
		st := &e.st
		if st.Uid > maxID || st.Gid > maxID {
			return rejectf("%s: owner %d:%d is out of range", e.rel, st.Uid, st.Gid)
		}
		var k kind
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			k = kindDir
		case unix.S_IFREG:
			k = kindFile
			key := inodeKey{uint64(st.Dev), st.Ino}
			if !seen[key] {
				if st.Nlink > 1 {
					seen[key] = true
				}
				bytes += st.Size
				if bytes > limits.MaxBytes {
					return tooLargef("more than %d bytes in total", limits.MaxBytes)
				}
			}
		case unix.S_IFLNK:
			k = kindSymlink
		default:
			return rejectf("%s is a %s; templates may hold only regular files, directories, symlinks and hardlinks",
				e.rel, fileTypeName(st.Mode))
		}
		return pruneXattrs(e, k)
	})
}

// pruneXattrs removes the extended attributes templates do not keep from
// walk entry e of kind k and checks the kept ones.
func pruneXattrs(e *walkEntry, k kind) error {
	p := e.procPath()
	list, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Llistxattr(p, b) })
	if err != nil {
		return fmt.Errorf("list extended attributes of %s: %w", e.rel, err)
	}
	kept := 0
	for name := range strings.SplitSeq(string(list), "\x00") {
		if name == "" {
			continue
		}
		if !keptXattr(name, k) {
			if err := unix.Lremovexattr(p, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("remove extended attribute %s of %s: %w", name, e.rel, err)
			}
			continue
		}
		kept++
		val, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Lgetxattr(p, name, b) })
		if err != nil {
			return fmt.Errorf("read extended attribute %s of %s: %w", name, e.rel, err)
		}
		if err := (xattr{name: name, value: val}).check(e.rel); err != nil {
			return err
		}
	}
	if kept > maxXattrs {
		return rejectf("%s: more than %d extended attributes", e.rel, maxXattrs)
	}
	return nil
}
