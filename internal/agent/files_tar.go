package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agentproto"
	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

// maxTarDepth bounds directory nesting in tar streams.
const maxTarDepth = 1024

// tarOut writes directory p as a tar stream to w: directories, regular
// files and symlinks, names relative to p; other file types are skipped.
// Nothing is followed: directories are opened with O_NOFOLLOW.
func (r fsRoot) tarOut(p model.GuestPath, w io.Writer) error {
	fd, err := r.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err = tarDir(tw, fd, "", 0, make([]byte, copyBuffer))
	unix.Close(fd)
	if err != nil {
		return err
	}
	return tw.Close()
}

func tarDir(tw *tar.Writer, dirfd int, prefix string, depth int, buf []byte) error {
	if depth > maxTarDepth {
		return fmt.Errorf("tar: directories nested deeper than %d at %s", maxTarDepth, prefix)
	}
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return fmt.Errorf("tar %s: %w", prefix, err)
	}
	d := os.NewFile(uintptr(dup), prefix)
	names, _, err := readNames(d, 0)
	d.Close()
	if err != nil {
		return fmt.Errorf("tar: read directory %s: %w", prefix, err)
	}
	for _, name := range names {
		if err := tarEntry(tw, dirfd, name, prefix+name, depth, buf); err != nil {
			return err
		}
	}
	return nil
}

func tarEntry(tw *tar.Writer, dirfd int, name, full string, depth int, buf []byte) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed meanwhile
		}
		return fmt.Errorf("tar: stat %s: %w", full, err)
	}
	hdr := &tar.Header{
		Name:    full,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, full+"/"
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("tar: open %s: %w", full, err)
		}
		defer unix.Close(fd)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		return tarDir(tw, fd, full+"/", depth+1, buf)
	case unix.S_IFLNK:
		target := make([]byte, 4096)
		n, err := unix.Readlinkat(dirfd, name, target)
		if err != nil {
			return fmt.Errorf("tar: readlink %s: %w", full, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, string(target[:n])
		return tw.WriteHeader(hdr)
	case unix.S_IFREG:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("tar: open %s: %w", full, err)
		}
		f := os.NewFile(uintptr(fd), full)
		defer f.Close()
		var again unix.Stat_t
		if err := unix.Fstat(fd, &again); err != nil || again.Ino != st.Ino || again.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("tar: %s changed while it was read", full)
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, again.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyBuffer(onlyWriter{tw}, io.LimitReader(f, again.Size), buf); err != nil {
			return fmt.Errorf("tar: read %s: %w", full, err)
		}
		return nil // a file that shrank meanwhile makes tw fail on the next header
	}
	return nil // devices, FIFOs and sockets are not archived
}

// tarIn extracts a tar stream into directory p (created if missing).
// Entry names must be relative and clean ("./" prefixes are accepted);
// every entry is resolved beneath p with RESOLVE_BENEATH, so neither a
// ".." nor a symlink (one from the archive included) can place anything
// outside p. Devices, FIFOs and other special entries are refused, which
// ends the extraction (entries before it stay).
func (r fsRoot) tarIn(p model.GuestPath, body io.Reader) (agentproto.TarResult, error) {
	var res agentproto.TarResult
	root, err := r.openRoot()
	if err != nil {
		return res, err
	}
	err = mkdirAllAt(root, rel(p), 0o755, inRoot, string(p))
	if err != nil {
		unix.Close(root)
		return res, err
	}
	target, err := openat2(root, rel(p), unix.O_PATH|unix.O_DIRECTORY, inRoot)
	unix.Close(root)
	if err != nil {
		return res, errnoError("open", string(p), err)
	}
	defer unix.Close(target)
	tr := tar.NewReader(body)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidRequest, "bad tar stream: %v", err)
		}
		n, err := extractEntry(target, p, hdr, tr)
		if err != nil {
			return res, err
		}
		res.Entries++
		res.Bytes += n
	}
}

// entryName checks a tar entry name and returns it relative and clean ("."
// for the target itself).
func entryName(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	for strings.HasPrefix(n, "./") {
		n = n[2:]
	}
	if n == "" || n == "." {
		return ".", nil
	}
	if len(name) > 4096 || strings.HasPrefix(n, "/") || !fs.ValidPath(n) || strings.ContainsRune(n, 0) {
		return "", fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "tar entry %q: names must be relative, clean and without '..'", textclip.Bytes(name, maxEcho))
	}
	for c := range strings.SplitSeq(n, "/") {
		if len(c) > 255 {
			return "", fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "tar entry %q: a name component is longer than 255 bytes", textclip.Bytes(name, maxEcho))
		}
	}
	return n, nil
}

// extractEntry writes one tar entry below target and returns the content
// bytes it wrote.
func extractEntry(target int, p model.GuestPath, hdr *tar.Header, body io.Reader) (int64, error) {
	name, err := entryName(hdr.Name)
	if err != nil {
		return 0, err
	}
	shown := path.Join(string(p), name)
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return 0, nil
	case tar.TypeDir:
		return 0, mkdirAllAt(target, name, uint32(hdr.Mode&0o7777)|0o700, beneath, shown)
	case tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		return 0, fileErrorf(http.StatusBadRequest, agentproto.CodeUnsupportedFileType, "tar entry %q: type %q is not a file, directory or link", textclip.Bytes(hdr.Name, maxEcho), string(hdr.Typeflag))
	}
	if name == "." {
		return 0, fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "tar entry %q names the target directory", textclip.Bytes(hdr.Name, maxEcho))
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if err := mkdirAllAt(target, dir, 0o755, beneath, path.Join(string(p), dir)); err != nil {
		return 0, err
	}
	dirfd, err := openat2(target, dir, unix.O_PATH|unix.O_DIRECTORY, beneath)
	if err != nil {
		return 0, errnoError("open", path.Join(string(p), dir), err)
	}
	defer unix.Close(dirfd)
	switch hdr.Typeflag {
	case tar.TypeReg:
		return writeFileAt(dirfd, base, shown, int(hdr.Mode&0o777), body)
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) || len(hdr.Linkname) > 4095 {
			return 0, fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "tar entry %q: bad link target", textclip.Bytes(hdr.Name, maxEcho))
		}
		if err := replaceNonDir(dirfd, base, shown); err != nil {
			return 0, err
		}
		if err := unix.Symlinkat(hdr.Linkname, dirfd, base); err != nil {
			return 0, errnoError("symlink", shown, err)
		}
		return 0, nil
	default: // hard link to an earlier entry
		old, err := entryName(hdr.Linkname)
		if err != nil || old == "." {
			return 0, fileErrorf(http.StatusBadRequest, agentproto.CodeInvalidPath, "tar entry %q: bad hard link target", textclip.Bytes(hdr.Name, maxEcho))
		}
		oldDir, oldBase := path.Split(old)
		ofd, err := openat2(target, cmpDot(strings.TrimSuffix(oldDir, "/")), unix.O_PATH|unix.O_DIRECTORY, beneath)
		if err != nil {
			return 0, errnoError("link", shown, err)
		}
		defer unix.Close(ofd)
		var st unix.Stat_t
		if err := unix.Fstatat(ofd, oldBase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, errnoError("link", shown, err)
		}
		if err := wantRegular(st.Mode, path.Join(string(p), old)); err != nil {
			return 0, err
		}
		if err := replaceNonDir(dirfd, base, shown); err != nil {
			return 0, err
		}
		if err := unix.Linkat(ofd, oldBase, dirfd, base, 0); err != nil {
			return 0, errnoError("link", shown, err)
		}
		return 0, nil
	}
}

func cmpDot(s string) string {
	if s == "" {
		return "."
	}
	return s
}

// replaceNonDir removes a file or symlink at name so a link can take its
// place; a directory there is an error.
func replaceNonDir(dirfd int, name, shown string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EISDIR):
		return fileErrorf(http.StatusConflict, agentproto.CodeIsADirectory, "%s is a directory", shown)
	}
	return errnoError("replace", shown, err)
}
