// Package treecopy is the one place in Airlock that copies root filesystem
// trees and the files in them. Everything that copies template content goes
// through it (internal/archtest enforces that no other package clones,
// copy_file_range()s or cp(1)s files), so that every copy keeps what a root
// filesystem needs kept:
//
//   - content, cloned with FICLONE (reflink) where the filesystem can share
//     extents (btrfs, XFS with reflink=1), else copied extent by extent with
//     copy_file_range, else with read and write;
//   - holes: only the data extents that SEEK_DATA/SEEK_HOLE report are
//     copied, so a sparse file stays sparse;
//   - hard links, kept as hard links (Tree);
//   - extended attributes, security.capability included;
//   - symlinks (never followed), modes with setuid/setgid/sticky,
//     ownership and modification times.
//
// File copies one regular file's content; Xattrs one file's extended
// attributes; Tree a whole directory tree.
package treecopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Method says how File copied a file's content.
type Method int

// Methods, fastest first.
const (
	Reflink   Method = iota + 1 // FICLONE: the copy shares the source's extents
	CopyRange                   // copy_file_range over each data extent
	ReadWrite                   // read and write over each data extent
)

func (m Method) String() string {
	switch m {
	case Reflink:
		return "reflink"
	case CopyRange:
		return "copy_file_range"
	case ReadWrite:
		return "read/write"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// chunk bounds one copy_file_range or read/write call, so that a
// cancelled context is noticed within one chunk.
const chunk = 8 << 20

// ErrChanged: the source file is not, or no longer, the size the caller
// measured (it is being written meanwhile).
var ErrChanged = errors.New("the file changed during the copy")

// File copies the content of the regular file src, which must be size
// bytes long (else ErrChanged), into dst, which must be empty and opened for writing. It
// tries a reflink first, then copies only the data extents (holes stay
// holes) with copy_file_range, falling back to read and write. It returns
// the method used. src's and dst's offsets are not used.
func File(ctx context.Context, dst, src *os.File, size int64) (Method, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", src.Name(), err)
	}
	if st.Size != size {
		return 0, fmt.Errorf("%w: %s has %d bytes, expected %d", ErrChanged, src.Name(), st.Size, size)
	}
	if size > 0 {
		if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
			// A clone takes the source whole, as it is now: had it grown
			// since it was measured, more than size was copied.
			if err := unix.Fstat(int(dst.Fd()), &st); err != nil {
				return 0, fmt.Errorf("stat %s: %w", dst.Name(), err)
			}
			if st.Size != size {
				return 0, fmt.Errorf("%w: %s has %d bytes after its clone, expected %d", ErrChanged, src.Name(), st.Size, size)
			}
			return Reflink, nil
		} else if !cloneUnsupported(err) {
			return 0, fmt.Errorf("clone %s: %w", src.Name(), err)
		}
	}
	m := CopyRange
	err := forEachExtent(int(src.Fd()), size, func(off, n int64) error {
		var err error
		m, err = copyExtent(ctx, dst, src, off, n, m)
		return err
	})
	if err != nil {
		return 0, err
	}
	if err := dst.Truncate(size); err != nil { // a trailing hole
		return 0, fmt.Errorf("truncate %s: %w", dst.Name(), err)
	}
	return m, nil
}

// cloneUnsupported reports whether FICLONE failed because the files cannot
// share extents (another filesystem, or one without reflinks).
func cloneUnsupported(err error) bool {
	return errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTTY) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) ||
		errors.Is(err, unix.EBADF) || errors.Is(err, unix.ETXTBSY)
}

// forEachExtent calls fn for each data extent of the first size bytes of
// fd, in order. A filesystem that cannot report holes has one extent.
func forEachExtent(fd int, size int64, fn func(off, n int64) error) error {
	off := int64(0)
	for off < size {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // only a hole is left
			return nil
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			return fn(off, size-off)
		case err != nil:
			return fmt.Errorf("seek data: %w", err)
		}
		if data >= size {
			return nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		hole = min(hole, size)
		if err := fn(data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyExtent copies n bytes at offset off from src to dst (same offset)
// with method m, falling back from copy_file_range to read/write, and
// returns the method it ended with.
func copyExtent(ctx context.Context, dst, src *os.File, off, n int64, m Method) (Method, error) {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		want := int(min(n, chunk))
		if m == CopyRange {
			roff, woff := off, off
			got, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, want, 0)
			switch {
			case err == nil && got > 0:
				off += int64(got)
				n -= int64(got)
				continue
			case err == nil: // EOF before the expected size
				return m, fmt.Errorf("%s ends early at %d bytes (it changed)", src.Name(), off)
			case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) ||
				errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EBADF):
				m = ReadWrite
			default:
				return m, fmt.Errorf("copy %s: %w", src.Name(), err)
			}
		}
		got, err := readWrite(dst, src, off, want)
		if err != nil {
			return m, err
		}
		off += int64(got)
		n -= int64(got)
	}
	return m, nil
}

func readWrite(dst, src *os.File, off int64, want int) (int, error) {
	buf := make([]byte, min(want, 1<<20))
	got, err := src.ReadAt(buf, off)
	if got == 0 {
		if err == nil || errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%s ends early at %d bytes (it changed)", src.Name(), off)
		}
		return 0, fmt.Errorf("read %s: %w", src.Name(), err)
	}
	if _, err := dst.WriteAt(buf[:got], off); err != nil {
		return 0, fmt.Errorf("write %s: %w", dst.Name(), err)
	}
	return got, nil
}
