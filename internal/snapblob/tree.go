package snapblob

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
)

const xattrPrefix = "SCHILY.xattr."

// writeTree writes the tree at dir to w as a deterministic PAX tar stream:
// names sorted, every entry's owner, mode, modification time (to the
// nanosecond) and extended attributes, regular files in full, a regular
// file's further names as hard links. Sockets are left out.
func writeTree(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	seen := map[[2]uint64]string{} // inode → first name
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return fmt.Errorf("stat %s: %w", rel, err)
		}
		hdr := &tar.Header{
			Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
			ModTime: time.Unix(st.Mtim.Unix()).UTC(), Format: tar.FormatPAX,
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case unix.S_IFREG:
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				break
			}
			if st.Nlink > 1 {
				seen[key] = rel
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		case unix.S_IFLNK:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		default:
			return nil // a socket
		}
		if hdr.Typeflag != tar.TypeLink {
			if hdr.PAXRecords, err = xattrRecords(path); err != nil {
				return fmt.Errorf("extended attributes of %s: %w", rel, err)
			}
		}
		if hdr.Typeflag != tar.TypeReg {
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		extents, err := sparseExtents(f, hdr)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, e := range extents {
			if _, err := io.Copy(tw, io.NewSectionReader(f, e.off, e.n)); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// xattrRecords returns path's extended attributes as PAX records (nil for
// none), not following a symlink.
func xattrRecords(path string) (map[string]string, error) {
	list, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Llistxattr(path, b) })
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Split(string(list), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	out := make(map[string]string, len(names))
	for _, n := range names {
		v, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Lgetxattr(path, n, b) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out[xattrPrefix+n] = string(v)
	}
	return out, nil
}

// readTree unpacks the tar stream r into the new directory dst, which it
// removes again if anything fails. Every entry must be named below dst, in
// a directory the stream made before (never through a symlink), and a
// hard link must name a regular file the stream made.
func readTree(ctx context.Context, r io.Reader, dst string) (err error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := os.RemoveAll(dst); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	x := &extractor{dst: dst, dirs: map[string]bool{}, files: map[string]bool{}}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return corrupt(err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	// Directories last, deepest first: their times after their entries.
	for i := len(x.dirHdrs) - 1; i >= 0; i-- {
		if err := x.meta(x.dirHdrs[i], false); err != nil {
			return err
		}
	}
	return nil
}

// corrupt wraps ErrCorrupt around a stream error that is not the blob
// store's or the context's.
func corrupt(err error) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

type extractor struct {
	dst     string
	dirs    map[string]bool // directories made, by clean relative name
	files   map[string]bool // regular files made
	dirHdrs []*tar.Header
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name := filepath.Clean(strings.TrimSuffix(hdr.Name, "/"))
	if !filepath.IsLocal(name) && name != "." {
		return fmt.Errorf("%w: entry %q is not below the snapshot", ErrCorrupt, hdr.Name)
	}
	hdr.Name = name
	if name == "." {
		if hdr.Typeflag != tar.TypeDir || len(x.dirHdrs) > 0 || len(x.dirs) > 0 {
			return fmt.Errorf("%w: the snapshot's root is not its first directory", ErrCorrupt)
		}
		x.dirs["."] = true
		x.dirHdrs = append(x.dirHdrs, hdr)
		return nil
	}
	if !x.dirs[filepath.Dir(name)] {
		return fmt.Errorf("%w: entry %q is not in a directory the stream made", ErrCorrupt, name)
	}
	path := filepath.Join(x.dst, name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(path, 0o700); err != nil {
			return corrupt(err)
		}
		x.dirs[name] = true
		x.dirHdrs = append(x.dirHdrs, hdr)
		return nil
	case tar.TypeReg:
		extents, size, err := parseSparse(hdr)
		if err != nil {
			return err
		}
		if err := writeSparse(path, r, extents, size); err != nil {
			return err
		}
		x.files[name] = true
	case tar.TypeLink:
		target := filepath.Clean(hdr.Linkname)
		if !x.files[target] {
			return fmt.Errorf("%w: hard link %q names %q, not a file the stream made", ErrCorrupt, name, hdr.Linkname)
		}
		if err := os.Link(filepath.Join(x.dst, target), path); err != nil {
			return corrupt(err)
		}
		return nil // the first name carries the metadata
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, path); err != nil {
			return corrupt(err)
		}
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
		if err := unix.Mknod(path, mode|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
	default:
		return fmt.Errorf("%w: entry %q has tar type %q", ErrCorrupt, name, hdr.Typeflag)
	}
	return x.meta(hdr, hdr.Typeflag == tar.TypeSymlink)
}

// meta gives an entry its owner, mode (after the owner: chown clears
// setuid), extended attributes and modification time.
func (x *extractor) meta(hdr *tar.Header, symlink bool) error {
	path := filepath.Join(x.dst, hdr.Name)
	if err := os.Lchown(path, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown %s: %w", hdr.Name, err)
	}
	if !symlink {
		if err := unix.Fchmodat(unix.AT_FDCWD, path, uint32(hdr.Mode&0o7777), 0); err != nil {
			return fmt.Errorf("chmod %s: %w", hdr.Name, err)
		}
	}
	names := make([]string, 0, len(hdr.PAXRecords))
	for k := range hdr.PAXRecords {
		if n, ok := strings.CutPrefix(k, xattrPrefix); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		if err := unix.Lsetxattr(path, n, []byte(hdr.PAXRecords[xattrPrefix+n]), 0); err != nil {
			return fmt.Errorf("set %s on %s: %w", n, hdr.Name, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times of %s: %w", hdr.Name, err)
	}
	return nil
}

// sparseBlock is the unit writeSparse leaves a hole for when it is all
// zeros.
const sparseBlock = 64 << 10

// writeSparse writes the data extents read from r, in order, into the new
// file path of size bytes, leaving holes between them and where whole
// blocks are zero.
func writeSparse(path string, r io.Reader, extents []extent, size int64) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return corrupt(err)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	buf := make([]byte, sparseBlock)
	for _, e := range extents {
		for off, end := e.off, e.off+e.n; off < end; {
			n, err := io.ReadFull(r, buf[:min(int64(len(buf)), end-off)])
			if err != nil {
				return corrupt(err)
			}
			if !allZero(buf[:n]) {
				if _, err := f.WriteAt(buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
		}
	}
	return f.Truncate(size)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// sparseRecord is the PAX record of a sparse regular file: its size and
// its data extents ("SIZE;OFF+LEN,OFF+LEN…"); the entry's content is the
// extents' bytes, in order, and its tar size their sum. A file without
// holes has none.
const sparseRecord = "AIRLOCK.sparse"

// maxSparseRecord bounds the record; a file with more extents than fit is
// written in full.
const maxSparseRecord = 256 << 10

type extent struct{ off, n int64 }

// sparseExtents returns the data extents of the regular file f of
// hdr.Size bytes (SEEK_DATA/SEEK_HOLE) and, if it has holes, records them
// in hdr (its Size becomes their sum).
func sparseExtents(f *os.File, hdr *tar.Header) ([]extent, error) {
	size := hdr.Size
	whole := []extent{{0, size}}
	if size == 0 {
		return nil, nil
	}
	fd := int(f.Fd())
	var out []extent
	var sum int64
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return whole, nil // no hole reporting
		}
		if err != nil {
			return nil, err
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		end = min(end, size)
		out = append(out, extent{start, end - start})
		sum += end - start
		off = end
	}
	if len(out) == 1 && out[0] == whole[0] {
		return whole, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d;", size)
	for i, e := range out {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d+%d", e.off, e.n)
	}
	if b.Len() > maxSparseRecord {
		return whole, nil
	}
	if hdr.PAXRecords == nil {
		hdr.PAXRecords = map[string]string{}
	}
	hdr.PAXRecords[sparseRecord] = b.String()
	hdr.Size = sum
	return out, nil
}

// parseSparse returns a regular file entry's data extents and size: its
// sparse record's, checked (in order, apart, within the size, adding up to
// the entry's content), or the whole content.
func parseSparse(hdr *tar.Header) ([]extent, int64, error) {
	rec, ok := hdr.PAXRecords[sparseRecord]
	if !ok {
		return []extent{{0, hdr.Size}}, hdr.Size, nil
	}
	bad := func() ([]extent, int64, error) {
		return nil, 0, fmt.Errorf("%w: %s: bad sparse record", ErrCorrupt, hdr.Name)
	}
	sizeText, list, ok := strings.Cut(rec, ";")
	size, err := strconv.ParseInt(sizeText, 10, 64)
	if !ok || err != nil || size < 0 {
		return bad()
	}
	var out []extent
	var sum, prev int64
	if list != "" {
		for _, item := range strings.Split(list, ",") {
			o, n, ok := strings.Cut(item, "+")
			off, err1 := strconv.ParseInt(o, 10, 64)
			ln, err2 := strconv.ParseInt(n, 10, 64)
			if !ok || err1 != nil || err2 != nil || off < prev || ln <= 0 || off > size-ln {
				return bad()
			}
			out = append(out, extent{off, ln})
			prev, sum = off+ln, sum+ln
		}
	}
	if sum != hdr.Size {
		return bad()
	}
	return out, size, nil
}
