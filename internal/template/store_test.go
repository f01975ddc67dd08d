package template

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

func TestDirAndTarGiveTheSameDigest(t *testing.T) {
	s, tmp := newStore(t)
	ctx := context.Background()
	src := makeSample(t)

	fromDir, err := s.ImportDir(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fromDir.Reused {
		t.Error("first import reported Reused")
	}
	if _, err := model.ParseTemplateDigest(string(fromDir.Digest)); err != nil {
		t.Fatal(err)
	}
	if got := manifestDigest(fromDir.Manifest); got != fromDir.Digest {
		t.Errorf("digest %s is not the manifest's sha256 %s", fromDir.Digest, got)
	}

	plain := tarDir(t, src, false)
	gz := tarDir(t, src, true)
	tarFile := filepath.Join(tmp, "t.tar")
	tgzFile := filepath.Join(tmp, "t.tgz")
	if err := os.WriteFile(tarFile, plain, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tgzFile, gz, 0o644); err != nil {
		t.Fatal(err)
	}
	imports := map[string]func() (Imported, error){
		"tar":              func() (Imported, error) { return s.ImportTar(ctx, bytes.NewReader(plain), nil) },
		"tar.gz":           func() (Imported, error) { return s.ImportTar(ctx, bytes.NewReader(gz), nil) },
		"ImportPath(.tar)": func() (Imported, error) { return s.ImportPath(ctx, tarFile, nil) },
		"ImportPath(.tgz)": func() (Imported, error) { return s.ImportPath(ctx, tgzFile, nil) },
		"ImportPath(dir)":  func() (Imported, error) { return s.ImportPath(ctx, src, nil) },
	}
	if tarBin, err := exec.LookPath("tar"); err == nil {
		imports["GNU tar"] = func() (Imported, error) {
			out, err := exec.Command(tarBin, "--numeric-owner", "-C", src, "-cf", "-", ".").Output()
			if err != nil {
				t.Fatalf("tar: %v", err)
			}
			return s.ImportTar(ctx, bytes.NewReader(out), nil)
		}
	} else {
		t.Log("no tar in PATH: the GNU tar case is not run")
	}
	for name, imp := range imports {
		got, err := imp()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got.Digest != fromDir.Digest || !bytes.Equal(got.Manifest, fromDir.Manifest) {
			t.Errorf("%s: digest %s, want %s", name, got.Digest, fromDir.Digest)
		}
		if !got.Reused {
			t.Errorf("%s: Reused = false for content already in the store", name)
		}
	}
	if err := s.Verify(ctx, fromDir.Digest); err != nil {
		t.Fatal(err)
	}
	requireNoStaging(t, s)
}

func TestImportPreservesMetadata(t *testing.T) {
	s, _ := newStore(t)
	imp, err := s.ImportDir(context.Background(), makeSample(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	root := s.RootfsDir(imp.Digest)
	stat := func(rel string) *syscall.Stat_t {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, rel), &st); err != nil {
			t.Fatal(err)
		}
		return &st
	}
	for _, c := range []struct {
		rel      string
		mode     uint32
		uid, gid uint32
	}{
		{".", syscall.S_IFDIR | 0o755, 0, 0},
		{"bin/tool", syscall.S_IFREG | 0o755, 0, 0},
		{"bin/suid", syscall.S_IFREG | 0o4755, 0, 0},
		{"etc/owned", syscall.S_IFREG | 0o640, 1000, 1001},
		{"home", syscall.S_IFDIR | 0o750, 1000, 1000},
		{"tmp", syscall.S_IFDIR | 0o1777, 0, 0},
		{"shared", syscall.S_IFDIR | 0o2775, 0, 0},
		{"bin/alias", syscall.S_IFLNK | 0o777, 0, 0},
	} {
		st := stat(c.rel)
		if st.Mode != c.mode || st.Uid != c.uid || st.Gid != c.gid {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", c.rel, st.Mode, st.Uid, st.Gid, c.mode, c.uid, c.gid)
		}
	}
	if a, b := stat("bin/tool"), stat("bin/hard"); a.Ino != b.Ino {
		t.Error("bin/hard is not a hardlink of bin/tool")
	}
	if a, b := stat("etc/owned"), stat("z-last"); a.Ino != b.Ino {
		t.Error("z-last is not a hardlink of etc/owned")
	}
	for link, want := range map[string]string{"bin/alias": "tool", "bin/abs": "/bin/tool", "bin/dangling": "../nowhere"} {
		if got, err := os.Readlink(filepath.Join(root, link)); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(root, "etc/owned")); err != nil || string(data) != "mine" {
		t.Errorf("etc/owned = %q, %v", data, err)
	}
	m, err := ParseManifest(imp.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	wantSize := int64(len("#!/bin/sh\necho hi\n") + len("suid") + len("mine"))
	if imp.SizeBytes != wantSize || m.Rootfs.SizeBytes != wantSize {
		t.Errorf("size %d (manifest %d), want %d", imp.SizeBytes, m.Rootfs.SizeBytes, wantSize)
	}
	if want := len(sampleTree()) + 1; imp.Entries != want || m.Rootfs.Entries != want {
		t.Errorf("entries %d (manifest %d), want %d", imp.Entries, m.Rootfs.Entries, want)
	}
}

func TestDigestDependsOnContentNotTimes(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	base := []node{
		{path: "a", kind: 'f', content: "hello", mode: 0o644},
		{path: "d", kind: 'd', mode: 0o755},
		{path: "d/l", kind: 'l', target: "../a"},
	}
	with := func(change func(n []node) []node) []node {
		n := append([]node(nil), base...)
		return change(n)
	}
	variants := map[string][]node{
		"base":           base,
		"content":        with(func(n []node) []node { n[0].content = "hellO"; return n }),
		"longer content": with(func(n []node) []node { n[0].content = "hello!"; return n }),
		"mode":           with(func(n []node) []node { n[0].mode = 0o600; return n }),
		"setuid":         with(func(n []node) []node { n[0].mode = 0o644 | os.ModeSetuid; return n }),
		"dir mode":       with(func(n []node) []node { n[1].mode = 0o700; return n }),
		"uid":            with(func(n []node) []node { n[0].uid = 1; return n }),
		"gid":            with(func(n []node) []node { n[0].gid = 1; return n }),
		"symlink owner":  with(func(n []node) []node { n[2].uid = 7; return n }),
		"symlink target": with(func(n []node) []node { n[2].target = "../b"; return n }),
		"added file":     with(func(n []node) []node { return append(n, node{path: "d/new", kind: 'f'}) }),
		"added dir":      with(func(n []node) []node { return append(n, node{path: "e", kind: 'd'}) }),
		"renamed":        with(func(n []node) []node { n[0].path = "b"; n[2].target = "../b"; return n }),
		"hardlink":       with(func(n []node) []node { return append(n, node{path: "d/h", kind: 'h', target: "a"}) }),
		"copy not link":  with(func(n []node) []node { return append(n, node{path: "d/h", kind: 'f', content: "hello"}) }),
	}
	seen := map[model.TemplateDigest]string{}
	var baseDigest model.TemplateDigest
	for name, nodes := range variants {
		dir := filepath.Join(t.TempDir(), "src")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		buildTree(t, dir, nodes)
		imp, err := s.ImportDir(ctx, dir, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if other, dup := seen[imp.Digest]; dup {
			t.Errorf("%s and %s have the same digest", name, other)
		}
		seen[imp.Digest] = name
		if name == "base" {
			baseDigest = imp.Digest
		}
	}

	// Different mtimes (files, dirs, symlinks, root) give the same digest.
	dir := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	buildTree(t, dir, base)
	old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	for _, rel := range []string{"a", "d/l", "d", "."} {
		ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, rel), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	imp, err := s.ImportDir(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if imp.Digest != baseDigest || !imp.Reused {
		t.Errorf("mtimes changed the digest: %s (reused %v), want %s", imp.Digest, imp.Reused, baseDigest)
	}
}

func TestConcurrentIdenticalImports(t *testing.T) {
	s, _ := newStore(t)
	src := makeSample(t)
	archive := tarDir(t, src, true)
	const n = 8
	results := make([]Imported, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				results[i], errs[i] = s.ImportDir(context.Background(), src, nil)
			} else {
				results[i], errs[i] = s.ImportTar(context.Background(), bytes.NewReader(archive), nil)
			}
		})
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("import %d: %v", i, errs[i])
		}
		if results[i].Digest != results[0].Digest {
			t.Errorf("import %d: digest %s, want %s", i, results[i].Digest, results[0].Digest)
		}
		if !results[i].Reused {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d imports report a fresh template, want exactly 1", fresh)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %d templates, %v; want one", len(list), err)
	}
	if err := s.Verify(context.Background(), results[0].Digest); err != nil {
		t.Fatal(err)
	}
	requireNoStaging(t, s)
}

// cancelReader serves head, then cancels the context and serves tail.
type cancelReader struct {
	head, tail []byte
	cancel     func()
}

func (c *cancelReader) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	c.cancel()
	if len(c.tail) == 0 {
		return 0, os.ErrClosed
	}
	n := copy(p, c.tail)
	c.tail = c.tail[n:]
	return n, nil
}

func TestCancellationRemovesStaging(t *testing.T) {
	s, _ := newStore(t)
	var entries []tarEntry
	for i := range 50 {
		entries = append(entries, reg("f"+string(rune('a'+i%26))+string(rune('a'+i/26)), string(bytes.Repeat([]byte{'x'}, 10000))))
	}
	archive := makeTar(t, entries...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.ImportTar(ctx, &cancelReader{head: archive[:len(archive)/2], tail: archive[len(archive)/2:], cancel: cancel}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	requireEmptyStore(t, s)

	// Cancelled from the progress callback, during a directory import.
	src := makeSample(t)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	_, err = s.ImportDir(ctx2, src, func(Progress) { cancel2() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	requireEmptyStore(t, s)
}

func TestProgress(t *testing.T) {
	s, _ := newStore(t)
	var calls []Progress
	imp, err := s.ImportDir(context.Background(), makeSample(t), func(p Progress) { calls = append(calls, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 2 || len(calls) > 10 {
		t.Fatalf("progress called %d times, want a first and a final report: %v", len(calls), calls)
	}
	last := calls[len(calls)-1]
	if last.Entries != imp.Entries || last.Bytes != imp.SizeBytes {
		t.Errorf("final progress %+v, imported %d entries %d bytes", last, imp.Entries, imp.SizeBytes)
	}
}

func TestOpenRemovesStaleStaging(t *testing.T) {
	s, _ := newStore(t)
	// A crashed import: a tree (with an unwritable directory) and a free lock.
	stale := filepath.Join(s.stagingDir(), "import-123")
	if err := os.MkdirAll(filepath.Join(stale, "blob/rootfs/ro/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(stale, "blob/rootfs/ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	// One without a lock file, and a stray file.
	if err := os.Mkdir(filepath.Join(s.stagingDir(), "import-456"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.stagingDir(), "junk"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// An import in progress (its lock held) must survive.
	live, err := s.newStaging()
	if err != nil {
		t.Fatal(err)
	}
	defer live.remove(s.logger)

	if _, err := Open(s.Dir(), nil); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, s.stagingDir()); len(got) != 1 || got[0] != filepath.Base(live.dir) {
		t.Fatalf("staging after Open = %v, want only the live %s", got, filepath.Base(live.dir))
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	ctx := context.Background()
	tamper := map[string]func(root string) error{
		"content": func(root string) error {
			return os.WriteFile(filepath.Join(root, "bin/tool"), []byte("#!/bin/sh\necho HI\n"), 0o755)
		},
		"mode":         func(root string) error { return os.Chmod(filepath.Join(root, "etc/empty"), 0o666) },
		"setuid":       func(root string) error { return os.Chmod(filepath.Join(root, "bin/suid"), 0o755) },
		"owner":        func(root string) error { return os.Lchown(filepath.Join(root, "etc/empty"), 5, 5) },
		"added file":   func(root string) error { return os.WriteFile(filepath.Join(root, "etc/extra"), nil, 0o644) },
		"removed file": func(root string) error { return os.Remove(filepath.Join(root, "etc/empty")) },
		"broken link":  func(root string) error { return os.Remove(filepath.Join(root, "bin/hard")) },
		"symlink": func(root string) error {
			p := filepath.Join(root, "bin/alias")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("/etc/shadow", p)
		},
		"fifo": func(root string) error { return unix.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644) },
		"manifest": func(root string) error {
			return os.WriteFile(filepath.Join(root, "../manifest.json"), []byte("{}"), 0o644)
		},
	}
	for name, fn := range tamper {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			imp, err := s.ImportDir(ctx, makeSample(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Verify(ctx, imp.Digest); err != nil {
				t.Fatalf("untouched template: %v", err)
			}
			if err := fn(s.RootfsDir(imp.Digest)); err != nil {
				t.Fatal(err)
			}
			if err := s.Verify(ctx, imp.Digest); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify after tampering = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestLookupsAndList(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	a, err := s.ImportTar(ctx, bytes.NewReader(makeTar(t, reg("a", "1"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ImportTar(ctx, bytes.NewReader(makeTar(t, reg("b", "2"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	missing := model.DigestFromSHA256([32]byte{1})
	if !s.Has(a.Digest) || !s.Has(b.Digest) || s.Has(missing) || s.Has("sha256:../../x") {
		t.Error("Has is wrong")
	}
	if s.RootfsDir("bogus") != "" {
		t.Error("RootfsDir accepted an invalid digest")
	}
	if got, err := s.Manifest(a.Digest); err != nil || !bytes.Equal(got, a.Manifest) {
		t.Errorf("Manifest = %s, %v", got, err)
	}
	if _, err := s.Manifest(missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("Manifest(missing) = %v, want ErrNotFound", err)
	}
	if err := s.Verify(ctx, missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("Verify(missing) = %v, want ErrNotFound", err)
	}
	// An unrelated entry in blobs/ is ignored.
	if err := os.Mkdir(filepath.Join(s.blobsDir(), "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("List = %d templates, want 2", len(list))
	}
	if list[0].Digest > list[1].Digest {
		t.Error("List not sorted")
	}
	for _, imp := range list {
		want := a
		if imp.Digest == b.Digest {
			want = b
		}
		if imp.Digest != want.Digest || !bytes.Equal(imp.Manifest, want.Manifest) || imp.SizeBytes != 1 || imp.Entries != 2 || imp.Reused {
			t.Errorf("List entry %+v, want %+v", imp, want)
		}
	}

	// A blob whose manifest does not hash to its name fails List.
	m, err := ParseManifest(a.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	m.Config.WorkingDir = "/tmp"
	forged, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.blobDir(a.Digest), "manifest.json"), forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("List with a forged manifest = %v, want ErrCorrupt", err)
	}
	if _, err := s.Manifest(a.Digest); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Manifest of a forged manifest = %v, want ErrCorrupt", err)
	}
}

func TestImportPathRejectsOtherFiles(t *testing.T) {
	s, tmp := newStore(t)
	ctx := context.Background()
	zip := filepath.Join(tmp, "t.zip")
	if err := os.WriteFile(zip, makeTar(t, reg("a", "1")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportPath(ctx, zip, nil); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("ImportPath(.zip) = %v, want ErrInvalid", err)
	}
	if _, err := s.ImportPath(ctx, filepath.Join(tmp, "missing.tar"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ImportPath(missing) = %v, want not-exist", err)
	}
	garbage := filepath.Join(tmp, "g.tar.gz")
	if err := os.WriteFile(garbage, []byte("not an archive at all, just some text that is long enough for a tar header..."), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportPath(ctx, garbage, nil); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("ImportPath(garbage) = %v, want ErrInvalid", err)
	}
	requireEmptyStore(t, s)
}

func TestLimits(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.SetLimits(Limits{MaxBytes: 100, MaxEntries: 5, MaxPathLen: 20}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimits(Limits{}); err == nil {
		t.Error("SetLimits accepted zero limits")
	}
	big := string(bytes.Repeat([]byte{'x'}, 60))
	cases := map[string][]node{
		"bytes":   {{path: "a", kind: 'f', content: big}, {path: "b", kind: 'f', content: big}},
		"entries": {{path: "a", kind: 'd'}, {path: "a/b", kind: 'd'}, {path: "a/b/c", kind: 'd'}, {path: "x", kind: 'f'}, {path: "y", kind: 'f'}},
		"path":    {{path: "a-very-long-name-indeed", kind: 'f'}},
	}
	for name, nodes := range cases {
		dir := filepath.Join(t.TempDir(), "src")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		buildTree(t, dir, nodes)
		if _, err := s.ImportDir(ctx, dir, nil); !errors.Is(err, ErrTooLarge) || !errors.Is(err, model.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrTooLarge", name, err)
		}
		if _, err := s.ImportTar(ctx, bytes.NewReader(tarDir(t, dir, false)), nil); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s (tar): err = %v, want ErrTooLarge", name, err)
		}
	}
	requireEmptyStore(t, s)
}

func requireNoStaging(t *testing.T, s *Store) {
	t.Helper()
	if names := listDir(t, s.stagingDir()); len(names) != 0 {
		t.Errorf("staging not empty: %v", names)
	}
}
