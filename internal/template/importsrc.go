package template

import (
	"archive/tar"
	"bufio"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// ImportPath imports a directory, or a tar archive named *.tar, *.tar.gz or
// *.tgz (compression is detected from the content either way).
func (s *Store) ImportPath(ctx context.Context, path string, progress func(Progress)) (Imported, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", path, err)
	}
	if fi.IsDir() {
		return s.ImportDir(ctx, path, progress)
	}
	name := strings.ToLower(filepath.Base(path))
	isTar := strings.HasSuffix(name, ".tar") || strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz")
	if !fi.Mode().IsRegular() || !isTar {
		return Imported{}, fmt.Errorf("%w: import %s: want a directory or a .tar, .tar.gz or .tgz archive", model.ErrInvalid, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: %w", path, err)
	}
	defer f.Close()
	return s.importTar(ctx, f, path, progress)
}

// ImportDir imports the tree rooted at directory src: regular files,
// directories, symlinks (copied as links, never followed) and hardlinks
// within the tree, with their modes, ownership and the extended attributes
// templates keep (xattr.go). File content goes through the copier
// (internal/rootfs/treecopy): reflinked where the filesystem allows, holes
// kept. Device nodes, fifos and sockets are refused.
func (s *Store) ImportDir(ctx context.Context, src string, progress func(Progress)) (Imported, error) {
	return s.ImportDirConfig(ctx, src, DefaultConfig(), progress)
}

// ImportDirConfig is ImportDir with the runtime configuration cfg in the
// template's manifest.
func (s *Store) ImportDirConfig(ctx context.Context, src string, cfg Config, progress func(Progress)) (Imported, error) {
	return s.importDir(ctx, src, cfg, progress, nil)
}

// ImportLayered imports merged, the tree of an overlay whose top layer
// is the directory top (a build step's changes) over template parent's
// tree, as ImportDirConfig does, and makes the same template; but a
// regular file the top layer does not hold, and that is the very inode of
// parent's file at the same path (overlayfs shows a lower file's own
// inode when its layers share a filesystem, as the store's do) with the
// same size, mode, owner and modification time, is hard-linked from
// parent's tree instead of copied, and its hash is the one remembered
// when parent was imported by this process (hashmemo.go) instead of read
// again. A file that fails any of these checks, or whose link fails, is
// copied.
func (s *Store) ImportLayered(ctx context.Context, merged, top string, parent model.TemplateDigest, cfg Config, progress func(Progress)) (Imported, error) {
	parentDir := s.RootfsDir(parent)
	if parentDir == "" {
		return Imported{}, fmt.Errorf("%w: template digest %q", model.ErrInvalid, parent)
	}
	topRoot, err := os.OpenRoot(top)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: top layer: %w", merged, err)
	}
	defer topRoot.Close()
	parentRoot, err := os.OpenRoot(parentDir)
	if err != nil {
		return Imported{}, fmt.Errorf("import %s: parent %s: %w", merged, parent, err)
	}
	defer parentRoot.Close()
	topDirs, parentDirs := &dirCache{root: topRoot}, &dirCache{root: parentRoot}
	defer topDirs.close()
	defer parentDirs.close()
	linked := 0
	imp, err := s.importDir(ctx, merged, cfg, progress, func(stg *stager, e *walkEntry) (bool, error) {
		dir, base := path.Split(e.rel)
		td, err := topDirs.open(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, nil // not knowable: copied
		}
		if td != nil {
			var tst unix.Stat_t
			if err := unix.Fstatat(int(td.Fd()), base, &tst, unix.AT_SYMLINK_NOFOLLOW); !errors.Is(err, unix.ENOENT) {
				return false, nil // changed (or not knowable): copied
			}
		}
		pd, err := parentDirs.open(dir)
		if err != nil {
			return false, nil
		}
		fd, err := unix.Openat(int(pd.Fd()), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, nil
		}
		f := os.NewFile(uintptr(fd), e.rel)
		defer f.Close()
		var pst unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &pst); err != nil {
			return false, nil
		}
		st := &e.st
		if pst.Mode != st.Mode || pst.Ino != st.Ino || pst.Size != st.Size || pst.Uid != st.Uid || pst.Gid != st.Gid || pst.Mtim != st.Mtim {
			return false, nil
		}
		after, err := stg.linkFrom(e.rel, pst.Size, f)
		if err != nil {
			if errors.Is(err, model.ErrInvalid) { // over a limit, or refused as a copy would be
				return false, err
			}
			s.logger.Debug("template import: link from the parent failed; copying", "path", e.rel, "err", err)
			return false, nil
		}
		s.hashes.relink(&pst, &after)
		linked++
		return true, nil
	})
	imp.LinkedFiles = linked
	return imp, err
}

// dirCache keeps the directory of the last entry open below root (a walk
// meets a directory's entries one after another).
type dirCache struct {
	root *os.Root
	rel  string
	f    *os.File // nil: rel does not exist below root
	err  error
	ok   bool
}

// open returns directory dir ("" for the root, else ending in "/") below
// root, or an error wrapping fs.ErrNotExist when it does not exist.
func (c *dirCache) open(dir string) (*os.File, error) {
	if c.ok && c.rel == dir {
		return c.f, c.err
	}
	c.close()
	name := strings.TrimSuffix(dir, "/")
	if name == "" {
		name = "."
	}
	c.f, c.err = c.root.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if c.err != nil {
		c.f = nil
	}
	c.rel, c.ok = dir, true
	return c.f, c.err
}

func (c *dirCache) close() {
	if c.f != nil {
		c.f.Close()
	}
	c.f, c.err, c.ok = nil, nil, false
}

// importDir imports the tree at src; reuse, if set, may place a regular
// file itself (true) instead of its copy.
func (s *Store) importDir(ctx context.Context, src string, cfg Config, progress func(Progress), reuse func(*stager, *walkEntry) (bool, error)) (Imported, error) {
	return s.importWith(ctx, progress, cfg, src, func(ctx context.Context, stg *stager) error {
		return s.fillFromDir(ctx, stg, src, false, reuse)
	})
}

// fillFromDir stages the tree rooted at directory src (see ImportDir).
// With link, its regular files are hard links to src's own inodes (Clone:
// src is an immutable tree of a store), copied only when src is on another
// filesystem. reuse, if set, may place a regular file itself (true)
// instead of its copy (ImportLayered).
func (s *Store) fillFromDir(ctx context.Context, stg *stager, src string, link bool, reuse func(*stager, *walkEntry) (bool, error)) error {
	links := map[inodeKey]string{}
	return walkTree(ctx, src, func(e *walkEntry) error {
		st := &e.st
		m := meta{
			mode:  st.Mode & 0o7777,
			uid:   int(st.Uid),
			gid:   int(st.Gid),
			mtime: time.Unix(st.Mtim.Unix()),
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := stg.dir(e.rel, m); err != nil {
				return err
			}
			return copyXattrs(stg, e)
		case unix.S_IFREG:
			key := inodeKey{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				if reuse == nil {
					return stg.hardlink(e.rel, first)
				}
				// The link changes the inode's change time: carry its
				// remembered hash over (hashmemo.go).
				var before, after unix.Stat_t
				firstPath := filepath.Join(stg.rootPath, first)
				errBefore := unix.Lstat(firstPath, &before)
				if err := stg.hardlink(e.rel, first); err != nil {
					return err
				}
				if errBefore == nil && unix.Lstat(firstPath, &after) == nil {
					s.hashes.relink(&before, &after)
				}
				return nil
			}
			if st.Nlink > 1 {
				links[key] = e.rel
			}
			if reuse != nil {
				if done, err := reuse(stg, e); done || err != nil {
					return err
				}
			}
			if link {
				err := stg.link(e, m)
				if !errors.Is(err, unix.EXDEV) {
					return err
				}
				link = false // another filesystem: copy this file and the rest
			}
			f, err := e.open()
			if err != nil {
				return err
			}
			defer f.Close()
			if err := stg.copyFile(ctx, e.rel, m, st.Size, f); err != nil {
				return err
			}
			return copyXattrs(stg, e)
		case unix.S_IFLNK:
			target, err := e.readlink()
			if err != nil {
				return err
			}
			return stg.symlink(e.rel, target, m)
		default:
			return rejectf("%s is a %s; templates may hold only regular files, directories, symlinks and hardlinks",
				filepath.Join(src, e.rel), fileTypeName(st.Mode))
		}
	})
}

// ImportTar imports a tar archive, plain or gzip-compressed (detected by its
// magic bytes). Members are extracted strictly inside the new tree: absolute
// names, ".." components, paths through a symlink or file, hardlinks to
// anything but an earlier regular file member, device nodes and fifos are
// refused, as is anything over the store's limits.
func (s *Store) ImportTar(ctx context.Context, r io.Reader, progress func(Progress)) (Imported, error) {
	return s.importTar(ctx, r, "tar archive", progress)
}

func (s *Store) importTar(ctx context.Context, r io.Reader, what string, progress func(Progress)) (Imported, error) {
	return s.importWith(ctx, progress, DefaultConfig(), what, func(ctx context.Context, stg *stager) error {
		br := bufio.NewReaderSize(ctxReader{ctx, r}, 64<<10)
		var src io.Reader = br
		if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
			gz, err := gzip.NewReader(br)
			if err != nil {
				return rejectf("gzip: %v", err)
			}
			defer gz.Close()
			src = gz
		}
		return extractTar(ctx, stg, tar.NewReader(src))
	})
}

func extractTar(ctx context.Context, stg *stager, tr *tar.Reader) error {
	members := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return tarReadError(ctx, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		members++
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		m := meta{mode: uint32(hdr.Mode) & 0o7777, uid: hdr.Uid, gid: hdr.Gid, mtime: hdr.ModTime}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeGNUSparse:
			err = stg.file(ctx, name, m, hdr.Size, tr)
			if err == nil {
				err = setTarXattrs(stg, name, hdr, kindFile)
			}
		case tar.TypeDir:
			err = stg.dir(name, m)
			if err == nil {
				err = setTarXattrs(stg, name, hdr, kindDir)
			}
		case tar.TypeSymlink:
			err = stg.symlink(name, hdr.Linkname, m)
		case tar.TypeLink:
			var target string
			if target, err = cleanName(hdr.Linkname); err != nil {
				return fmt.Errorf("%s: hardlink target: %w", name, err)
			}
			err = stg.hardlink(name, target)
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return rejectf("%s is a %s; templates may hold only regular files, directories, symlinks and hardlinks",
				name, tarTypeName(hdr.Typeflag))
		default:
			return rejectf("%s: unsupported tar entry type %q", name, hdr.Typeflag)
		}
		if err != nil {
			if sre := (*sourceReadError)(nil); errors.As(err, &sre) {
				return tarReadError(ctx, err)
			}
			return err
		}
	}
	if members == 0 {
		return rejectf("the archive has no entries")
	}
	return nil
}

// setTarXattrs gives staged entry name the kept extended attributes of its
// tar header (PAX SCHILY.xattr records).
func setTarXattrs(stg *stager, name string, hdr *tar.Header, k kind) error {
	xs, err := tarXattrs(name, hdr, k)
	if err != nil || len(xs) == 0 {
		return err
	}
	return stg.setXattrs(name, xs)
}

// tarReadError classifies an error from reading the archive: format errors
// and truncation are invalid input; anything else (I/O) is returned as is.
func tarReadError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrInsecurePath) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.As(err, new(flate.CorruptInputError)) ||
		strings.HasPrefix(err.Error(), "archive/tar:") {
		return rejectf("read tar: %v", err)
	}
	return fmt.Errorf("read tar: %w", err)
}

func tarTypeName(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}
