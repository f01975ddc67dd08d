package treecopy

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Xattrs copies the extended attributes of src for which keep returns true
// (all of them if keep is nil) onto dst, in name order. Run it after
// changing dst's owner: chown clears security.capability. A filesystem
// without extended attributes has none to copy.
func Xattrs(dst, src *os.File, keep func(name string) bool) error {
	if err := copyXattrs(int(dst.Fd()), int(src.Fd()), keep); err != nil {
		return fmt.Errorf("%s: %w", src.Name(), err)
	}
	return nil
}

func copyXattrs(dst, src int, keep func(name string) bool) error {
	names, err := listXattrs(src)
	if err != nil {
		return fmt.Errorf("list extended attributes: %w", err)
	}
	for _, name := range names {
		if keep != nil && !keep(name) {
			continue
		}
		val, err := getXattr(src, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("read extended attribute %s: %w", name, err)
		}
		if err := unix.Fsetxattr(dst, name, val, 0); err != nil {
			return fmt.Errorf("set extended attribute %s: %w", name, err)
		}
	}
	return nil
}

func listXattrs(fd int) ([]string, error) {
	buf, err := XattrBuffer(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range strings.SplitSeq(string(buf), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func getXattr(fd int, name string) ([]byte, error) {
	return XattrBuffer(func(b []byte) (int, error) { return unix.Fgetxattr(fd, name, b) })
}

// XattrBuffer calls a list or get extended-attribute syscall with a growing
// buffer (up to 4 MiB) and returns what it wrote. A filesystem without
// extended-attribute support yields nothing; other errors (ENODATA for an
// attribute that is gone) are returned as they are.
func XattrBuffer(call func([]byte) (int, error)) ([]byte, error) {
	size := 256
	for {
		buf := make([]byte, size)
		n, err := call(buf)
		switch {
		case err == nil:
			return buf[:n], nil
		case errors.Is(err, unix.ERANGE) && size < 1<<20:
			size *= 4
		case errors.Is(err, unix.ENOTSUP):
			return nil, nil
		default:
			return nil, err
		}
	}
}
