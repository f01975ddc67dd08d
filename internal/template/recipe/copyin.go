package recipe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// copyInto copies step c's source from the context directory into the tree
// whose root directory is open as rootFd. Paths in the tree resolve as they
// would inside it (RESOLVE_IN_ROOT: absolute symlinks and ".." stay in the
// tree). It returns the source digest it saw, which the caller compares
// with the one the step's key was computed from.
func copyInto(ctx context.Context, rootFd int, src *os.Root, c Copy) (string, error) {
	sh := newSourceHasher()
	err := visitSource(ctx, src, c, func(e srcEntry) error {
		dst := c.Dst
		if e.rel != "." {
			dst = path.Join(c.Dst, e.rel)
		}
		parent, err := ensureDir(rootFd, path.Dir(dst))
		if err != nil {
			return err
		}
		defer unix.Close(parent)
		base := path.Base(dst)
		var sum []byte
		switch e.kind {
		case 'd':
			err = mkdirIn(rootFd, parent, base, dst)
		case 'f':
			sum, err = writeFileIn(ctx, parent, base, dst, src, e, sh.buf)
		case 'l':
			if err = clearLeaf(parent, base, dst); err == nil {
				err = unix.Symlinkat(e.target, parent, base)
			}
			if err == nil {
				err = unix.Fchownat(parent, base, 0, 0, unix.AT_SYMLINK_NOFOLLOW)
			}
		}
		if err != nil {
			return fmt.Errorf("copy %s to %s: %w", e.full, dst, err)
		}
		sh.add(e, sum)
		return nil
	})
	if err != nil {
		return "", err
	}
	return sh.sum(), nil
}

// ensureDir opens directory p of the tree, creating missing components
// (mode 0755, owned by root).
func ensureDir(rootFd int, p string) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFd, "/", how)
	if err != nil {
		return -1, fmt.Errorf("open the tree's root: %w", err)
	}
	cur := "/"
	for comp := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		if comp == "" {
			continue
		}
		next := path.Join(cur, comp)
		nfd, err := unix.Openat2(rootFd, next, how)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, comp, 0o755); err == nil {
				err = unix.Fchownat(fd, comp, 0, 0, unix.AT_SYMLINK_NOFOLLOW)
			}
			if err == nil {
				nfd, err = unix.Openat2(rootFd, next, how)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("directory %s in the tree: %w", next, err)
		}
		fd, cur = nfd, next
	}
	return fd, nil
}

// clearLeaf removes a non-directory at name so that it can be replaced; a
// directory there is an error.
func clearLeaf(parent int, name, dst string) error {
	var st unix.Stat_t
	err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return fmt.Errorf("%s is a directory in the tree", dst)
	}
	return unix.Unlinkat(parent, name, 0)
}

// mkdirIn makes directory dst of the tree, name in its open parent. A
// directory there, or a symlink that resolves to one inside the tree, is
// used as it is; anything else (a file, a symlink to a file or to nothing in
// the tree) is replaced. Resolving in the tree's root matters: a symlink's
// target on the host must neither change the outcome nor be revealed.
func mkdirIn(rootFd, parent int, name, dst string) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFd, dst, how)
	switch {
	case err == nil:
		unix.Close(fd)
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
	default:
		return err
	}
	if err := clearLeaf(parent, name, dst); err != nil {
		return err
	}
	if err := unix.Mkdirat(parent, name, 0o755); err != nil {
		return err
	}
	return unix.Fchownat(parent, name, 0, 0, unix.AT_SYMLINK_NOFOLLOW)
}

func writeFileIn(ctx context.Context, parent int, name, dst string, src *os.Root, e srcEntry, buf []byte) ([]byte, error) {
	if err := clearLeaf(parent, name, dst); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dst)
	defer f.Close()
	sum, err := hashFile(ctx, src, e, f, buf)
	if err != nil {
		return nil, err
	}
	if err := f.Chown(0, 0); err != nil {
		return nil, err
	}
	// After chown, which clears setuid and setgid.
	if err := unix.Fchmod(fd, e.perm); err != nil {
		return nil, err
	}
	return sum, f.Close()
}
