package template

import (
	"archive/tar"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/rootfs/treecopy"
	"github.com/airlockdev/airlock/internal/textclip"
)

// Extended attributes kept in templates.
//
// A template keeps, on regular files and directories only:
//
//   - security.capability (file capabilities, VFS revision 2 or 3), on
//     regular files;
//   - user.* except user.overlay.*, which overlayfs mounted with userxattr
//     would read as its own metadata (redirects, opaque and whiteout marks).
//
// Everything else is dropped: trusted.* (overlayfs metadata again),
// security.selinux and other LSM labels (host policy, not image content),
// system.* (POSIX ACLs), and any xattr on a symlink. The tree digest covers
// exactly the kept attributes (tree.go), so labels a host adds by itself
// never change a digest.
const (
	xattrCapability = "security.capability"
	xattrNameMax    = 255      // XATTR_NAME_MAX
	xattrValueMax   = 64 << 10 // XATTR_SIZE_MAX
	maxXattrs       = 128      // kept attributes per entry
)

// paxXattrPrefix starts the PAX records that carry extended attributes.
const paxXattrPrefix = "SCHILY.xattr."

type xattr struct {
	name  string
	value []byte
}

// keptXattr reports whether xattr name is kept in templates on an entry of
// kind k (see above).
func keptXattr(name string, k kind) bool {
	switch {
	case k != kindFile && k != kindDir:
		return false
	case name == xattrCapability:
		return k == kindFile
	case strings.HasPrefix(name, "user.overlay."):
		return false
	case strings.HasPrefix(name, "user."):
		return len(name) > len("user.")
	}
	return false
}

// tarXattrs returns the kept extended attributes of a tar entry of kind k
// from its PAX records, sorted by name, after checking them.
func tarXattrs(rel string, hdr *tar.Header, k kind) ([]xattr, error) {
	var xs []xattr
	for key, val := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(key, paxXattrPrefix)
		if !ok || !keptXattr(name, k) {
			continue
		}
		x := xattr{name: name, value: []byte(val)}
		if err := x.check(rel); err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	if len(xs) > maxXattrs {
		return nil, rejectf("%s: more than %d extended attributes", rel, maxXattrs)
	}
	slices.SortFunc(xs, func(a, b xattr) int { return strings.Compare(a.name, b.name) })
	return xs, nil
}

func (x xattr) check(rel string) error {
	if len(x.name) > xattrNameMax || strings.IndexByte(x.name, 0) >= 0 {
		return rejectf("%s: invalid extended attribute name %q", rel, textclip.Bytes(x.name, maxEcho))
	}
	if len(x.value) > xattrValueMax {
		return tooLargef("%s: extended attribute %s is larger than %d bytes", rel, x.name, xattrValueMax)
	}
	if x.name == xattrCapability {
		return checkCapability(rel, x.value)
	}
	return nil
}

// checkCapability accepts what the kernel accepts in security.capability: a
// struct vfs_cap_data of revision 2 (20 bytes) or 3 (24 bytes, with the
// owning user namespace's root uid).
func checkCapability(rel string, v []byte) error {
	const (
		revMask = 0xff000000
		rev2    = 0x02000000
		rev3    = 0x03000000
	)
	if len(v) >= 4 {
		switch rev := binary.LittleEndian.Uint32(v) & revMask; {
		case rev == rev2 && len(v) == 20, rev == rev3 && len(v) == 24:
			return nil
		}
	}
	return rejectf("%s: security.capability is not a revision 2 or 3 capability set (%d bytes)", rel, len(v))
}

// setXattrs makes the kept extended attributes of entry rel (a regular file
// or directory the stager made) exactly xs. On files it runs after chown,
// which clears security.capability.
func (s *stager) setXattrs(rel string, xs []xattr) error {
	k := s.kinds[rel]
	if k != kindFile && k != kindDir {
		return nil
	}
	flags := os.O_RDONLY | unix.O_NOFOLLOW
	if k == kindDir {
		flags |= unix.O_DIRECTORY
	}
	f, err := s.root.OpenFile(rel, flags, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if k == kindDir { // a directory entry may update one from a lower layer
		old, err := listKeptXattrs(fd, k)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, name := range old {
			if !slices.ContainsFunc(xs, func(x xattr) bool { return x.name == name }) {
				if err := unix.Fremovexattr(fd, name); err != nil {
					return fmt.Errorf("remove extended attribute %s of %s: %w", name, rel, err)
				}
			}
		}
	}
	for _, x := range xs {
		if err := unix.Fsetxattr(fd, x.name, x.value, 0); err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ERANGE) {
				return rejectf("%s: extended attribute %s: %v", rel, x.name, err)
			}
			return fmt.Errorf("set extended attribute %s of %s: %w", x.name, rel, err)
		}
	}
	return nil
}

// listKeptXattrs returns the names of the kept extended attributes of the
// open file fd of kind k, sorted.
func listKeptXattrs(fd int, k kind) ([]string, error) {
	buf, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
	if err != nil {
		return nil, fmt.Errorf("list extended attributes: %w", err)
	}
	return keptNames(buf, k), nil
}

func keptNames(list []byte, k kind) []string {
	var names []string
	for name := range strings.SplitSeq(string(list), "\x00") {
		if name != "" && keptXattr(name, k) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// appendXattrRecords appends the tree digest records of the kept extended
// attributes of walk entry e (a directory or a regular file seen first under
// this name) to rec: one "x" name value-hex record each, in name order.
func appendXattrRecords(rec []byte, e *walkEntry) ([]byte, error) {
	xs, err := readKeptXattrs(e)
	if err != nil {
		return rec, err
	}
	for _, x := range xs {
		rec = append(rec, "x\x00"...)
		rec = append(append(rec, x.name...), 0)
		rec = append(hex.AppendEncode(rec, x.value), 0)
	}
	return rec, nil
}

// readKeptXattrs returns the kept extended attributes of walk entry e (a
// directory or a regular file), sorted by name.
func readKeptXattrs(e *walkEntry) ([]xattr, error) {
	k := kindFile
	if e.st.Mode&unix.S_IFMT == unix.S_IFDIR {
		k = kindDir
	}
	// The entry is named relative to an open directory; the kernel has no
	// llistxattrat before Linux 6.13, so go through that directory's fd.
	p := e.procPath()
	list, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Llistxattr(p, b) })
	if err != nil {
		return nil, fmt.Errorf("list extended attributes of %s: %w", e.rel, err)
	}
	var xs []xattr
	for _, name := range keptNames(list, k) {
		val, err := treecopy.XattrBuffer(func(b []byte) (int, error) { return unix.Lgetxattr(p, name, b) })
		if errors.Is(err, unix.ENODATA) {
			continue // removed since it was listed: it is not part of the tree
		}
		if err != nil {
			return nil, fmt.Errorf("read extended attribute %s of %s: %w", name, e.rel, err)
		}
		xs = append(xs, xattr{name: name, value: val})
	}
	return xs, nil
}

// procPath names walk entry e through its open directory's fd.
func (e *walkEntry) procPath() string { return fmt.Sprintf("/proc/self/fd/%d/%s", e.dirFd, e.name) }
