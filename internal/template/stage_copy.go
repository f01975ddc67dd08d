package template

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
)

// sparseBlock is the granularity at which writeSparse leaves holes.
const sparseBlock = 4096

// writeSparse writes b at offset off of f, skipping the sparseBlock-aligned
// blocks that are all zeros (the file must be empty there: a new file).
func writeSparse(f *os.File, b []byte, off int64) error {
	start := 0 // first byte of the pending run of data
	for i := 0; i < len(b); {
		end := min(len(b), i+sparseBlock-int((off+int64(i))%sparseBlock))
		if end-i == sparseBlock && allZero(b[i:end]) {
			if start < i {
				if _, err := f.WriteAt(b[start:i], off+int64(start)); err != nil {
					return err
				}
			}
			start = end
		}
		i = end
	}
	if start < len(b) {
		if _, err := f.WriteAt(b[start:], off+int64(start)); err != nil {
			return err
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// copyFile creates regular file rel as a copy of the open regular file src
// of size bytes, through the copier (internal/rootfs/treecopy): cloned
// where the filesystem allows, holes kept. Its extended attributes are the
// caller's to copy (copyXattrs checks them), after the chown of applyMeta,
// which clears security.capability.
func (s *stager) copyFile(ctx context.Context, rel string, m meta, size int64, src *os.File) error {
	f, err := s.createFile(rel, m, size)
	if err != nil {
		return err
	}
	if _, err = treecopy.File(ctx, f, src, size); errors.Is(err, treecopy.ErrChanged) {
		// Copied past the size the limits counted, or short of it.
		err = fmt.Errorf("%w: %s changed during the import: %w", model.ErrInvalid, rel, err)
	}
	if err == nil {
		s.bytes += size
		s.progress.report(s.entries, s.bytes, false)
		err = applyMeta(f, m)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", rel, cerr)
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	return s.setTimes(rel, m.mtime)
}

// linkFrom makes rel another name of src, an open regular file of size
// bytes of a published template (the parent of a layered import): the
// same inode, whose metadata and extended attributes are the parent's and
// so are left as they are (a template's files are never changed). It
// returns the file's stat after the link.
func (s *stager) linkFrom(rel string, size int64, src *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	if size > s.limits.MaxBytes-s.bytes {
		return st, tooLargef("%s: %d bytes would exceed the limit of %d bytes in total", rel, size, s.limits.MaxBytes)
	}
	if _, err := s.prepare(rel, kindFile); err != nil {
		return st, err
	}
	d, base, err := s.openParent(rel)
	if err != nil {
		return st, err
	}
	if err := unix.Linkat(int(src.Fd()), "", int(d.Fd()), base, unix.AT_EMPTY_PATH); err != nil {
		return st, fmt.Errorf("link %s: %w", rel, err)
	}
	s.kinds[rel] = kindFile
	s.bytes += size
	s.progress.report(s.entries, s.bytes, false)
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return st, fmt.Errorf("stat %s: %w", rel, err)
	}
	return st, nil
}
