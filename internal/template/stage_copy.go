package template

import (
	"context"
	"errors"
	"fmt"
	"os"

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
