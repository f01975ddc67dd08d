package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// up climbs from a staging root (<tmp>/store/staging/import-*/blob/rootfs)
// to <tmp>, and then some.
const up = "../../../../../../../../"

type badArchive struct {
	name   string
	data   []byte
	limits *Limits
}

// headerOnly returns an archive cut right after the header of a member that
// declares size bytes.
func headerOnly(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func halve(b []byte) []byte { return b[:len(b)/2] }

// badArchives builds archives that must all be refused. outside is an
// absolute directory that an escape would write into; it holds "victim".
func badArchives(t testing.TB, outside string) []badArchive {
	dev := func(name string, typ byte) tarEntry {
		return tarEntry{hdr: tar.Header{Name: name, Typeflag: typ, Devmajor: 1, Devminor: 3}}
	}
	valid := makeTar(t, reg("a", strings.Repeat("x", 1000)), reg("b", "y"))
	many := make([]tarEntry, 20)
	for i := range many {
		many[i] = reg("f"+strings.Repeat("x", i), "")
	}
	return []badArchive{
		{name: "absolute name", data: makeTar(t, reg(outside+"/pwned", "x"))},
		{name: "absolute /etc", data: makeTar(t, reg("/etc/airlock-test-pwned", "x"))},
		{name: "dotdot", data: makeTar(t, reg(up+"outside/pwned", "x"))},
		{name: "dotdot after dir", data: makeTar(t, dirEntry("a/"), reg("a/"+up+"outside/pwned", "x"))},
		{name: "dotdot dir", data: makeTar(t, dirEntry(up+"outside/newdir/"))},
		{name: "dotdot symlink name", data: makeTar(t, symlinkEntry(up+"outside/l", "/"))},
		{name: "write through absolute symlink", data: makeTar(t, symlinkEntry("s", outside), reg("s/pwned", "x"))},
		{name: "write through relative symlink", data: makeTar(t, symlinkEntry("s", up+"outside"), reg("s/pwned", "x"))},
		{name: "write through symlink to root", data: makeTar(t, symlinkEntry("s", "/"), reg("s"+outside+"/pwned", "x"))},
		{name: "overwrite victim through symlink dir", data: makeTar(t, symlinkEntry("s", outside), reg("s/victim", "pwned"))},
		{name: "symlink chain", data: makeTar(t, symlinkEntry("a", "b"), symlinkEntry("b", "c"), symlinkEntry("c", outside), reg("a/pwned", "x"))},
		{name: "nested symlink parent", data: makeTar(t, dirEntry("d/"), symlinkEntry("d/s", outside), reg("d/s/deeper/pwned", "x"))},
		{name: "mkdir through symlink", data: makeTar(t, symlinkEntry("s", outside), dirEntry("s/newdir/"))},
		{name: "symlink through symlink", data: makeTar(t, symlinkEntry("s", outside), symlinkEntry("s/l", "/"))},
		{name: "hardlink through symlink dir", data: makeTar(t, symlinkEntry("s", outside), reg("f", "x"), hardlinkEntry("s/h", "f"))},
		{name: "hardlink to absolute victim", data: makeTar(t, hardlinkEntry("h", outside+"/victim"), reg("h", "pwned"))},
		{name: "hardlink to /etc/passwd", data: makeTar(t, hardlinkEntry("passwd", "/etc/passwd"))},
		{name: "hardlink dotdot", data: makeTar(t, hardlinkEntry("h", up+"outside/victim"))},
		{name: "hardlink via symlink", data: makeTar(t, symlinkEntry("s", outside), hardlinkEntry("h", "s/victim"))},
		{name: "hardlink to escaping symlink", data: makeTar(t, symlinkEntry("s", outside+"/victim"), hardlinkEntry("h", "s"), reg("h", "pwned"))},
		{name: "hardlink to directory", data: makeTar(t, dirEntry("d/"), hardlinkEntry("h", "d"))},
		{name: "hardlink to missing", data: makeTar(t, hardlinkEntry("h", "nothere"))},
		{name: "hardlink to itself", data: makeTar(t, reg("f", "x"), hardlinkEntry("f", "f"))},
		{name: "directory replaced by symlink", data: makeTar(t, dirEntry("d/"), symlinkEntry("d", outside), reg("d/pwned", "x"))},
		{name: "character device", data: makeTar(t, dev("null", tar.TypeChar))},
		{name: "block device", data: makeTar(t, dev("sda", tar.TypeBlock))},
		{name: "fifo", data: makeTar(t, tarEntry{hdr: tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}})},
		{name: "unsupported type", data: makeTar(t, tarEntry{hdr: tar.Header{Name: "c", Typeflag: tar.TypeCont}})},
		{name: "huge declared size", data: headerOnly(t, "huge", 1<<40)},
		{name: "declared size over limit", data: makeTar(t, reg("a", strings.Repeat("x", 600))), limits: &Limits{MaxBytes: 512, MaxEntries: 100, MaxPathLen: 100}},
		{name: "too many entries", data: makeTar(t, many...), limits: &Limits{MaxBytes: 1 << 20, MaxEntries: 10, MaxPathLen: 100}},
		{name: "implicit parents count", data: makeTar(t, reg("a/b/c/d/e/f/g/h/i/j/k", "")), limits: &Limits{MaxBytes: 1 << 20, MaxEntries: 10, MaxPathLen: 100}},
		{name: "path too long", data: makeTar(t, reg(strings.Repeat("d/", 2100)+"f", ""))},
		{name: "truncated content", data: valid[:512+300]},
		{name: "truncated header", data: valid[:100]},
		{name: "truncated gzip", data: halve(gzipped(t, valid))},
		{name: "gzip garbage", data: append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}, bytes.Repeat([]byte{0xff}, 100)...)},
		{name: "empty archive", data: make([]byte, 1024)},
		{name: "not an archive", data: []byte(strings.Repeat("hello world\n", 100))},
	}
}

func TestMaliciousTarIsRefused(t *testing.T) {
	for _, c := range badArchives(t, "/nonexistent") {
		t.Run(c.name, func(t *testing.T) {
			s, tmp := newStore(t)
			outside := filepath.Join(tmp, "outside")
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			// Rebuild this case with the real outside directory.
			var data []byte
			for _, b := range badArchives(t, outside) {
				if b.name == c.name {
					data = b.data
				}
			}
			if c.limits != nil {
				if err := s.SetLimits(*c.limits); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, tmp, s.Dir())
			etcBefore, _ := os.ReadFile("/etc/passwd")

			imp, err := s.ImportTar(context.Background(), bytes.NewReader(data), nil)
			if err == nil {
				t.Fatalf("accepted: %s", imp.Digest)
			}
			if !errors.Is(err, model.ErrInvalid) {
				t.Errorf("err = %v, want one wrapping model.ErrInvalid", err)
			}
			t.Logf("refused: %v", err)
			after := snapshot(t, tmp, s.Dir())
			for p, d := range after {
				if before[p] != d {
					t.Errorf("written outside the store: %s = %q", p, d)
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("removed outside the store: %s", p)
				}
			}
			if _, err := os.Lstat("/etc/airlock-test-pwned"); err == nil {
				t.Error("/etc/airlock-test-pwned was written")
			}
			if etcAfter, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(etcBefore, etcAfter) {
				t.Error("/etc/passwd changed")
			}
			requireEmptyStore(t, s)
		})
	}
}

// Some suspicious-looking archives are fine: they are neutralized inside
// the tree, never outside it.
func TestTarEntriesAreNeutralizedInside(t *testing.T) {
	s, tmp := newStore(t)
	outside := filepath.Join(tmp, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := makeTar(t,
		symlinkEntry("f", victim),                 // an escaping symlink is kept as a link…
		reg("f", "replaced"),                      // …and a later member replaces it, not its target
		symlinkEntry("etc-passwd", "/etc/passwd"), // kept as is; resolved only in the sandbox
		reg("./dot/./slashes//x", "x"),            // normalized
		dirEntry("dot/"),                          // merges with the implicit parent
		reg("dup", "first"), reg("dup", "second"),
		reg("orig", "o"), hardlinkEntry("./link", "./orig"),
	)
	imp, err := s.ImportTar(context.Background(), bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	root := s.RootfsDir(imp.Digest)
	if got, _ := os.ReadFile(victim); string(got) != "original" {
		t.Fatalf("victim changed to %q", got)
	}
	for rel, want := range map[string]string{"f": "replaced", "dot/slashes/x": "x", "dup": "second", "link": "o"} {
		fi, err := os.Lstat(filepath.Join(root, rel))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want a regular file", rel, fi, err)
			continue
		}
		if got, _ := os.ReadFile(filepath.Join(root, rel)); string(got) != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "etc-passwd")); err != nil || target != "/etc/passwd" {
		t.Errorf("etc-passwd -> %q, %v", target, err)
	}
	if err := s.Verify(context.Background(), imp.Digest); err != nil {
		t.Fatal(err)
	}
}

func TestMaliciousSourceDir(t *testing.T) {
	ctx := context.Background()
	t.Run("symlinks are copied, never followed", func(t *testing.T) {
		s, tmp := newStore(t)
		outside := filepath.Join(tmp, "outside")
		if err := os.MkdirAll(filepath.Join(outside, "secret-dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(tmp, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			t.Fatal(err)
		}
		buildTree(t, src, []node{
			{path: "loop-a", kind: 'l', target: "loop-b"},
			{path: "loop-b", kind: 'l', target: "loop-a"},
			{path: "self", kind: 'l', target: "self"},
			{path: "dirloop", kind: 'd'},
			{path: "dirloop/up", kind: 'l', target: ".."},
			{path: "root", kind: 'l', target: "/"},
			{path: "out", kind: 'l', target: outside},
			{path: "secret", kind: 'l', target: filepath.Join(outside, "secret")},
			{path: "rel-out", kind: 'l', target: "../outside/secret-dir"},
		})
		before := snapshot(t, tmp, s.Dir())
		imp, err := s.ImportDir(ctx, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if imp.Entries != 10 || imp.SizeBytes != 0 {
			t.Errorf("imported %d entries, %d bytes; want the 10 entries as they are", imp.Entries, imp.SizeBytes)
		}
		root := s.RootfsDir(imp.Digest)
		for _, rel := range []string{"loop-a", "self", "dirloop/up", "root", "out", "secret", "rel-out"} {
			fi, err := os.Lstat(filepath.Join(root, rel))
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("%s: %v %v, want a symlink", rel, fi, err)
			}
		}
		after := snapshot(t, tmp, s.Dir())
		if len(before) != len(after) {
			t.Errorf("files outside the store changed: %d before, %d after", len(before), len(after))
		}
	})

	special := map[string]func(p string) error{
		"fifo":   func(p string) error { return unix.Mkfifo(p, 0o644) },
		"device": func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) },
		"socket": func(p string) error {
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
			if err != nil {
				return err
			}
			l.SetUnlinkOnClose(false)
			return l.Close()
		},
	}
	for name, mk := range special {
		t.Run(name, func(t *testing.T) {
			s, tmp := newStore(t)
			src := filepath.Join(tmp, "src")
			if err := os.MkdirAll(filepath.Join(src, "dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(src, "dir", "special")
			if err := mk(p); err != nil {
				t.Skipf("cannot create a %s here: %v", name, err)
			}
			_, err := s.ImportDir(ctx, src, nil)
			if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), p) {
				t.Errorf("err = %v, want ErrInvalid naming %s", err, p)
			}
			requireEmptyStore(t, s)
		})
	}
}

func FuzzImportTar(f *testing.F) {
	f.Add(tarDir(f, makeSample(f), false))
	f.Add(tarDir(f, makeSample(f), true))
	f.Add(makeTar(f, reg("a", "1"), hardlinkEntry("b", "a"), symlinkEntry("c", "/"), dirEntry("d/")))
	for _, b := range badArchives(f, "/tmp") {
		f.Add(b.data)
	}
	// One store per fuzzing process: creating and removing directories is
	// what an iteration costs here.
	s, tmp := newStore(f)
	if err := s.SetLimits(Limits{MaxBytes: 1 << 20, MaxEntries: 1000, MaxPathLen: 1024}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		blobsBefore := listDir(t, s.blobsDir())
		imp, err := s.ImportTar(context.Background(), bytes.NewReader(data), nil)
		if names := listDir(t, tmp); len(names) != 1 || names[0] != "store" {
			t.Fatalf("files outside the store: %v", names)
		}
		if names := listDir(t, s.stagingDir()); len(names) != 0 {
			t.Fatalf("staging left behind: %v", names)
		}
		if err != nil {
			if blobs := listDir(t, s.blobsDir()); !slices.Equal(blobs, blobsBefore) {
				t.Fatalf("failed import changed the blobs: %v -> %v", blobsBefore, blobs)
			}
			return
		}
		if err := s.Verify(context.Background(), imp.Digest); err != nil {
			t.Fatalf("imported template does not verify: %v", err)
		}
	})
}
