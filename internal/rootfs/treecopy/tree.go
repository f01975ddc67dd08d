package treecopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Options change what Tree copies.
type Options struct {
	// KeepXattr selects the extended attributes copied on regular files and
	// directories; nil copies all of them. Symlinks' are never copied.
	KeepXattr func(name string) bool
}

// Stats counts what Tree copied.
type Stats struct {
	Entries   int   // directories, files, symlinks, hard links and special files, the root included
	Bytes     int64 // regular file bytes, each inode once
	Hardlinks int   // names that became hard links to an earlier copied file
	Reflinked int   // files whose content was cloned
}

type inodeKey struct{ dev, ino uint64 }

// Tree copies the directory tree at src to dst, which must not exist yet
// (its parent must). Nothing below src is followed through a symlink;
// symlinks are copied as symlinks. Regular files are copied with File, so
// reflinks are used where possible and holes are kept; files that share an
// inode in src share one in dst; ownership, permission bits (setuid, setgid
// and sticky included), modification times and extended attributes are
// kept; character and block devices and fifos are re-created; sockets are
// skipped. On error, dst is left partly copied for the caller to remove.
func Tree(ctx context.Context, src, dst string, opts Options) (Stats, error) {
	var st Stats
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, fmt.Errorf("open %s: %w", src, err)
	}
	defer unix.Close(sfd)
	var root unix.Stat_t
	if err := unix.Fstat(sfd, &root); err != nil {
		return st, fmt.Errorf("stat %s: %w", src, err)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return st, fmt.Errorf("create %s: %w", dst, err)
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return st, fmt.Errorf("open %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	c := &copier{opts: opts, root: dfd, links: map[inodeKey]string{}, stats: &st}
	st.Entries++
	if err := c.dir(ctx, sfd, dfd, "."); err != nil {
		return st, err
	}
	if err := c.finishDir(sfd, dfd, &root, "."); err != nil {
		return st, err
	}
	return st, nil
}

type copier struct {
	opts  Options
	root  int                 // dst's root directory
	links map[inodeKey]string // first copied path of each inode with more than one name
	stats *Stats
}

// dir copies the entries of the open source directory sfd into the open
// destination directory dfd.
func (c *copier) dir(ctx context.Context, sfd, dfd int, rel string) error {
	names, err := readNames(sfd)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := name
		if rel != "." {
			p = rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		c.stats.Entries++
		if err := c.entry(ctx, sfd, dfd, name, p, &st); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) entry(ctx context.Context, sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return fmt.Errorf("create directory %s: %w", rel, err)
		}
		cs, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open directory %s: %w", rel, err)
		}
		defer unix.Close(cs)
		cd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open directory %s: %w", rel, err)
		}
		defer unix.Close(cd)
		if err := c.dir(ctx, cs, cd, rel); err != nil {
			return err
		}
		return c.finishDir(cs, cd, st, rel)
	case unix.S_IFREG:
		key := inodeKey{uint64(st.Dev), st.Ino}
		if first, ok := c.links[key]; ok {
			// first is a file this walk made, below directories it made.
			if err := unix.Linkat(c.root, first, dfd, name, 0); err != nil {
				return fmt.Errorf("hard link %s: %w", rel, err)
			}
			c.stats.Hardlinks++
			return nil
		}
		if err := c.file(ctx, sfd, dfd, name, rel, st); err != nil {
			return err
		}
		if st.Nlink > 1 {
			c.links[key] = rel
		}
		return nil
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax+1)
		n, err := unix.Readlinkat(sfd, name, buf)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", rel, err)
		}
		if err := unix.Symlinkat(string(buf[:n]), dfd, name); err != nil {
			return fmt.Errorf("create symlink %s: %w", rel, err)
		}
		if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
		return setTimes(dfd, name, st)
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		if err := unix.Mknodat(dfd, name, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", rel, err)
		}
		if err := unix.Fchmodat(dfd, name, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("chmod %s: %w", rel, err)
		}
		return setTimes(dfd, name, st)
	}
	c.stats.Entries-- // sockets are not copied
	return nil
}

func (c *copier) file(ctx context.Context, sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	fd, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	in := os.NewFile(uintptr(fd), rel)
	defer in.Close()
	ofd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	out := os.NewFile(uintptr(ofd), rel)
	m, err := File(ctx, out, in, st.Size)
	if err == nil {
		err = applyMeta(int(out.Fd()), int(in.Fd()), st, c.opts.KeepXattr)
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", rel, err)
	}
	c.stats.Bytes += st.Size
	if m == Reflink {
		c.stats.Reflinked++
	}
	return setTimes(dfd, name, st)
}

// finishDir applies a copied directory's metadata once its entries are in.
func (c *copier) finishDir(sfd, dfd int, st *unix.Stat_t, rel string) error {
	err := applyMeta(dfd, sfd, st, c.opts.KeepXattr)
	if err == nil {
		ts := []unix.Timespec{st.Atim, st.Mtim}
		err = unix.UtimesNanoAt(dfd, ".", ts, 0)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// applyMeta sets owner, then mode (chown clears setuid and setgid), then
// extended attributes (chown clears security.capability).
func applyMeta(out, in int, st *unix.Stat_t, keep func(string) bool) error {
	if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return copyXattrs(out, in, keep)
}

func setTimes(dfd int, name string, st *unix.Stat_t) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", name, err)
	}
	return nil
}

// readNames lists the names in the open directory fd (without "." and "..").
func readNames(fd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}
