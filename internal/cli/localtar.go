package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// writeLocalTar writes directory dir as a tar stream: directories, regular
// files and symlinks (not followed), names relative to dir.
func writeLocalTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return nil // devices, FIFOs and sockets are not copied
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uname, hdr.Gname = "", ""
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// extractLocalTar extracts a tar stream (from a sandbox: untrusted) into
// dir, which it creates. Every entry goes through an os.Root, so neither
// ".." nor absolute names nor symlinks can place anything outside dir;
// devices and other special entries are refused.
func extractLocalTar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	buf := make([]byte, 256<<10)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		for strings.HasPrefix(name, "./") {
			name = name[2:]
		}
		if name == "" || name == "." {
			continue
		}
		if !fs.ValidPath(name) {
			return fmt.Errorf("tar entry %q: not a clean relative name", hdr.Name)
		}
		local := filepath.FromSlash(name)
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
				return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(local, fs.FileMode(hdr.Mode&0o777)|0o700); err != nil {
				return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			f, err := root.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(hdr.Mode&0o777))
			if err != nil {
				return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
			_, err = io.CopyBuffer(f, tr, buf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
			if err := root.Chmod(local, fs.FileMode(hdr.Mode&0o777)); err != nil {
				return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(local)
			if err := root.Symlink(hdr.Linkname, local); err != nil {
				return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
			}
		case tar.TypeXGlobalHeader:
		default:
			return fmt.Errorf("tar entry %q: type %q is not copied", hdr.Name, string(hdr.Typeflag))
		}
	}
}
