package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// treeDigestMagic starts the byte stream that the tree digest hashes. Change
// the format below only together with this version string.
//
// Tree digest format, version 1. The tree is walked depth first, pre-order,
// the entries of each directory in byte order of their names; the root is
// the entry ".", every other entry is named by its slash-separated path
// relative to the root. Each entry appends one record of NUL-terminated
// fields (paths and symlink targets cannot contain NUL; numbers are decimal,
// permissions four octal digits including setuid, setgid and sticky):
//
//	directory:     "d" path perm uid gid
//	regular file:  "f" path perm uid gid size sha256-hex
//	hardlink:      "h" path first-path   (a regular file whose inode was already
//	                                      recorded under first-path in this walk)
//	symlink:       "l" path uid gid target
//	xattr:         "x" name value-hex    (follows the "d" or "f" record of the
//	                                      entry that has it, one per kept extended
//	                                      attribute in byte order of the names)
//
// Only the extended attributes that templates keep are hashed (see
// xattr.go); a tree without any hashes exactly as it did before "x" records
// were added. Modification and access times, other extended attributes and
// the inode numbers themselves are not part of it.
const treeDigestMagic = "airlock-rootfs-tree-v1\x00"

// treeSummary is what the tree digest walk learns about a tree.
type treeSummary struct {
	digest  [32]byte
	size    int64 // regular file bytes, each inode once
	entries int   // including the root
	// hashed are the files digestTree read, with their hashes (only with
	// a memo: for the memo once the tree is published).
	hashed map[memoKey]memoEntry
	// read is how many bytes of file content it read.
	read int64
}

func (t treeSummary) digestString() string { return "sha256:" + hex.EncodeToString(t.digest[:]) }

type inodeKey struct{ dev, ino uint64 }

// digestTree computes the tree digest of the directory at root without
// following any symlink inside it. With a memo, a file whose hash it
// remembers is not read (see hashmemo.go).
func digestTree(ctx context.Context, root string, memo *hashMemo) (treeSummary, error) {
	var sum treeSummary
	if memo != nil {
		sum.hashed = map[memoKey]memoEntry{}
	}
	h := sha256.New()
	io.WriteString(h, treeDigestMagic)
	links := map[inodeKey]string{}
	buf := make([]byte, 256<<10)
	fileHash := sha256.New()
	rec := make([]byte, 0, 512)
	field := func(s string) { rec = append(append(rec, s...), 0) }
	num := func(n uint64) { rec = append(strconv.AppendUint(rec, n, 10), 0) }
	perm := func(mode uint32) {
		s := strconv.FormatUint(uint64(mode&0o7777), 8)
		for len(s) < 4 {
			s = "0" + s
		}
		field(s)
	}
	err := walkTree(ctx, root, func(e *walkEntry) error {
		sum.entries++
		rec = rec[:0]
		st := &e.st
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			field("d")
			field(e.rel)
			perm(st.Mode)
			num(uint64(st.Uid))
			num(uint64(st.Gid))
			var err error
			if rec, err = appendXattrRecords(rec, e); err != nil {
				return err
			}
		case unix.S_IFREG:
			key := inodeKey{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				field("h")
				field(e.rel)
				field(first)
				break
			}
			if st.Nlink > 1 {
				links[key] = e.rel
			}
			fileSum, known := memo.lookup(st)
			n := st.Size
			if !known {
				f, err := e.open()
				if err != nil {
					return err
				}
				fileHash.Reset()
				n, err = io.CopyBuffer(fileHash, ctxReader{ctx, f}, buf)
				f.Close()
				if err != nil {
					return fmt.Errorf("read %s: %w", e.rel, err)
				}
				if n != st.Size {
					return fmt.Errorf("%w: %s changed size while being hashed", ErrCorrupt, e.rel)
				}
				sum.read += n
				copy(fileSum[:], fileHash.Sum(nil))
			}
			if sum.hashed != nil {
				sum.hashed[memoKeyOf(st)] = memo.entryOf(st, fileSum)
			}
			sum.size += n
			field("f")
			field(e.rel)
			perm(st.Mode)
			num(uint64(st.Uid))
			num(uint64(st.Gid))
			num(uint64(n))
			field(hex.EncodeToString(fileSum[:]))
			var err error
			if rec, err = appendXattrRecords(rec, e); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := e.readlink()
			if err != nil {
				return err
			}
			field("l")
			field(e.rel)
			num(uint64(st.Uid))
			num(uint64(st.Gid))
			field(target)
		default:
			return fmt.Errorf("%w: %s is a %s; templates hold only directories, regular files and symlinks", ErrCorrupt, e.rel, fileTypeName(st.Mode))
		}
		h.Write(rec)
		return nil
	})
	if err != nil {
		return treeSummary{}, err
	}
	copy(sum.digest[:], h.Sum(nil))
	return sum, nil
}

// walkEntry is one entry met by walkTree.
type walkEntry struct {
	rel   string // "." for the root, else the slash-separated path below it
	dirFd int    // open directory holding the entry (the root's own fd for ".")
	name  string // name of the entry within dirFd ("." for the root)
	st    unix.Stat_t
}

// open opens a regular file entry for reading without following symlinks
// and checks that it is still the inode that was examined.
func (e *walkEntry) open() (*os.File, error) {
	fd, err := unix.Openat(e.dirFd, e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", e.rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", e.rel, err)
	}
	if st.Dev != e.st.Dev || st.Ino != e.st.Ino || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s changed while being read", e.rel)
	}
	return os.NewFile(uintptr(fd), e.rel), nil
}

// readlink returns a symlink entry's target.
func (e *walkEntry) readlink() (string, error) {
	buf := make([]byte, unix.PathMax+1)
	n, err := unix.Readlinkat(e.dirFd, e.name, buf)
	if err != nil {
		return "", fmt.Errorf("readlink %s: %w", e.rel, err)
	}
	if n > unix.PathMax {
		return "", fmt.Errorf("readlink %s: target longer than %d bytes", e.rel, unix.PathMax)
	}
	return string(buf[:n]), nil
}

// walkTree calls fn for the directory root and then for every entry below it,
// depth first, pre-order, the entries of each directory sorted by name. It
// never follows a symlink below root: every lookup is one path component
// relative to an open directory, with O_NOFOLLOW. An error from fn stops the
// walk and is returned.
func walkTree(ctx context.Context, root string, fn func(*walkEntry) error) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", root, err)
	}
	defer unix.Close(fd)
	e := walkEntry{rel: ".", dirFd: fd, name: "."}
	if err := unix.Fstat(fd, &e.st); err != nil {
		return fmt.Errorf("stat %s: %w", root, err)
	}
	if err := fn(&e); err != nil {
		return err
	}
	return walkDir(ctx, fd, "", fn)
}

func walkDir(ctx context.Context, fd int, prefix string, fn func(*walkEntry) error) error {
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", relOrRoot(prefix), err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := walkEntry{rel: prefix + name, dirFd: fd, name: name}
		if err := unix.Fstatat(fd, name, &e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", e.rel, err)
		}
		if err := fn(&e); err != nil {
			return err
		}
		if e.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		child, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open directory %s: %w", e.rel, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(child, &st); err != nil || st.Dev != e.st.Dev || st.Ino != e.st.Ino {
			unix.Close(child)
			return fmt.Errorf("directory %s changed during the walk", e.rel)
		}
		err = walkDir(ctx, child, e.rel+"/", fn)
		unix.Close(child)
		if err != nil {
			return err
		}
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
	return f.Readdirnames(-1)
}

func relOrRoot(prefix string) string {
	if prefix == "" {
		return "."
	}
	return prefix[:len(prefix)-1]
}

func fileTypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFLNK:
		return "symlink"
	}
	return fmt.Sprintf("file of unknown type %#o", mode&unix.S_IFMT)
}

// ctxReader stops reading once its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
