package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

// newStore opens a store in <tmp>/store and returns it with <tmp>.
func newStore(t testing.TB) (*Store, string) {
	t.Helper()
	airtest.RequireRoot(t) // imports preserve arbitrary ownership
	tmp := t.TempDir()
	s, err := Open(filepath.Join(tmp, "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, tmp
}

// node describes one entry of a test tree.
type node struct {
	path    string
	kind    byte // 'f' file, 'd' dir, 'l' symlink, 'h' hardlink to target
	content string
	target  string
	mode    os.FileMode // permission bits incl. os.ModeSetuid etc.; 0 means default
	uid     int
	gid     int
}

// buildTree creates the nodes under dir (which must exist) in order.
func buildTree(t testing.TB, dir string, nodes []node) {
	t.Helper()
	for _, n := range nodes {
		p := filepath.Join(dir, n.path)
		var err error
		switch n.kind {
		case 'f':
			err = os.WriteFile(p, []byte(n.content), 0o644)
		case 'd':
			err = os.Mkdir(p, 0o755)
		case 'l':
			err = os.Symlink(n.target, p)
		case 'h':
			err = os.Link(filepath.Join(dir, n.target), p)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n.kind == 'h' {
			continue
		}
		if err := os.Lchown(p, n.uid, n.gid); err != nil {
			t.Fatal(err)
		}
		if n.mode != 0 && n.kind != 'l' {
			if err := os.Chmod(p, n.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sampleTree has one of everything a template may hold.
func sampleTree() []node {
	return []node{
		{path: "bin", kind: 'd'},
		{path: "bin/tool", kind: 'f', content: "#!/bin/sh\necho hi\n", mode: 0o755},
		{path: "bin/suid", kind: 'f', content: "suid", mode: 0o4755 | os.ModeSetuid},
		{path: "bin/alias", kind: 'l', target: "tool"},
		{path: "bin/abs", kind: 'l', target: "/bin/tool"},
		{path: "bin/dangling", kind: 'l', target: "../nowhere"},
		{path: "bin/hard", kind: 'h', target: "bin/tool"},
		{path: "etc", kind: 'd'},
		{path: "etc/empty", kind: 'f'},
		{path: "etc/owned", kind: 'f', content: "mine", uid: 1000, gid: 1001, mode: 0o640},
		{path: "home", kind: 'd', uid: 1000, gid: 1000, mode: 0o750},
		{path: "tmp", kind: 'd', mode: 0o777 | os.ModeSticky},
		{path: "shared", kind: 'd', mode: 0o775 | os.ModeSetgid},
		{path: "z-last", kind: 'h', target: "etc/owned"},
	}
}

// makeSample builds sampleTree in a new directory with mode 0755.
func makeSample(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	buildTree(t, dir, sampleTree())
	return dir
}

// tarDir archives dir (its root as "./") the way a tar tool would, in
// readdir order, with hardlinks as link members.
func tarDir(t testing.TB, dir string, compress bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var gz *gzip.Writer
	if compress {
		gz = gzip.NewWriter(&buf)
		w = gz
	}
	tw := tar.NewWriter(w)
	seen := map[uint64]string{}
	err := filepath.Walk(dir, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := "./" + rel
		if rel == "." {
			name = "./"
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if fi.IsDir() && rel != "." {
			hdr.Name += "/"
		}
		st := fi.Sys().(*syscall.Stat_t)
		hdr.Uname, hdr.Gname = "", ""
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := seen[st.Ino]; ok {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				hdr.Size = 0
			} else {
				seen[st.Ino] = name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// snapshot records every path under dir (except skip) with its type, mode,
// owner, size and content, to detect any write.
func snapshot(t testing.TB, dir, skip string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d ", fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += string(data)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += "-> " + target
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listDir returns the names in dir, sorted.
func listDir(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// requireEmptyStore fails unless the store holds no template and no staging.
func requireEmptyStore(t testing.TB, s *Store) {
	t.Helper()
	if names := listDir(t, s.stagingDir()); len(names) != 0 {
		t.Errorf("staging not empty: %v", names)
	}
	if names := listDir(t, s.blobsDir()); len(names) != 0 {
		t.Errorf("blobs not empty: %v", names)
	}
}

// tarEntry is one raw member of a hand-made archive.
type tarEntry struct {
	hdr  tar.Header
	data string
}

// makeTar writes the entries; truncate > 0 cuts the result to that many bytes.
func makeTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.data != "" {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name, data string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg}, data: data}
}

func dirEntry(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}}
}

func symlinkEntry(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}

func hardlinkEntry(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}}
}
