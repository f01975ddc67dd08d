package agentclient_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/agent"
	"github.com/airlockdev/airlock/internal/agentclient"
	"github.com/airlockdev/airlock/internal/agentproto"
)

// filesAgent embeds an agent whose files root is a fresh temp dir and
// returns a client for it, the root, and a directory outside the root with
// one file, "secret", that no request may touch.
func filesAgent(t *testing.T) (c *agentclient.Client, root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(outside, "secret"), "secret")
	srv := newServer(t, agent.Options{FilesRoot: root})
	rec, _ := unixDialer(t, srv)
	return newClient(t, rec.Dial), root, outside
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t testing.TB, what string, err error, code string) {
	t.Helper()
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Errorf("%s: err = %v, want code %s", what, err, code)
	}
}

// snapshot lists every path under dir with its type and content, to check
// that a refused request changed nothing.
func snapshot(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + d.Type().String())
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		}
		if d.Type()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			b.WriteString(" -> " + l)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestFilesRefusals(t *testing.T) {
	t.Parallel()
	c, root, outside := filesAgent(t)
	ctx := ctxT(t)
	writeFile(t, filepath.Join(root, "etc/passwd"), "guest")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../../outside", filepath.Join(root, "rel_out"))) // relative escape
	must(os.Symlink(outside, filepath.Join(root, "abs_out")))         // absolute host path
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "final_out")))
	must(os.Symlink("/etc", filepath.Join(root, "abs_etc"))) // absolute: the guest's /etc
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	must(unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	long := "/" + strings.Repeat("a", 256)
	before := snapshot(t, filepath.Dir(root))

	type op func() error
	read := func(p string) op {
		return func() error {
			rc, _, err := c.ReadFile(ctx, p)
			if err == nil {
				rc.Close()
			}
			return err
		}
	}
	write := func(p string) op {
		return func() error { _, err := c.WriteFile(ctx, p, -1, strings.NewReader("pwned")); return err }
	}
	stat := func(p string) op { return func() error { _, err := c.Stat(ctx, p); return err } }
	list := func(p string) op { return func() error { _, err := c.ListDir(ctx, p); return err } }
	mkdir := func(p string) op {
		return func() error { _, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: p}); return err }
	}
	remove := func(p string) op {
		return func() error { return c.Remove(ctx, agentproto.RemoveRequest{Path: p, Recursive: true}) }
	}
	move := func(from, to string) op {
		return func() error { return c.Move(ctx, agentproto.MoveRequest{From: from, To: to}) }
	}
	tarIn := func(dir string, entries ...*tar.Header) op {
		return func() error {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range entries {
				if h.Typeflag == tar.TypeReg {
					h.Size = 5
				}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if h.Typeflag == tar.TypeReg {
					_, _ = tw.Write([]byte("pwned"))
				}
			}
			tw.Close()
			_, err := c.TarIn(ctx, dir, &buf)
			return err
		}
	}
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }

	cases := []struct {
		name string
		do   op
		code string
	}{
		{"relative path", stat("etc/passwd"), agentproto.CodeInvalidPath},
		{"dot-dot", read("/../outside/secret"), agentproto.CodeInvalidPath},
		{"dot-dot inside", write("/etc/../../outside/secret"), agentproto.CodeInvalidPath},
		{"unclean", stat("/etc//passwd"), agentproto.CodeInvalidPath},
		{"NUL", stat("/etc/pass\x00wd"), agentproto.CodeInvalidPath},
		{"component over 255", write(long), agentproto.CodeInvalidPath},
		{"path over 4096", stat(strings.Repeat("/abc", 1025)), agentproto.CodeInvalidPath},
		{"relative symlink escape, middle", read("/rel_out/secret"), agentproto.CodeNotFound},
		{"relative symlink escape, write", write("/rel_out/secret"), agentproto.CodeNotFound},
		{"absolute symlink, middle", read("/abs_out/secret"), agentproto.CodeNotFound},
		{"absolute symlink, mkdir", mkdir("/abs_out/x"), agentproto.CodeNotFound},
		{"absolute symlink, remove", remove("/abs_out/secret"), agentproto.CodeNotFound},
		{"absolute symlink, move", move("/abs_out/secret", "/stolen"), agentproto.CodeNotFound},
		{"final symlink out, read", read("/final_out"), agentproto.CodeNotFound},
		{"final symlink out, write", write("/final_out"), agentproto.CodeUnsupportedFileType},
		{"final symlink in root, write", write("/abs_etc"), agentproto.CodeUnsupportedFileType},
		{"absolute symlink stays in root", list("/abs_etc/passwd"), agentproto.CodeNotADirectory},
		{"fifo read", read("/fifo"), agentproto.CodeUnsupportedFileType},
		{"fifo write", write("/fifo"), agentproto.CodeUnsupportedFileType},
		{"device read", read("/null"), agentproto.CodeUnsupportedFileType},
		{"device write", write("/null"), agentproto.CodeUnsupportedFileType},
		{"device move", move("/null", "/null2"), agentproto.CodeUnsupportedFileType},
		{"read a directory", read("/etc"), agentproto.CodeIsADirectory},
		{"list a file", list("/etc/passwd"), agentproto.CodeNotADirectory},
		{"remove root", remove("/"), agentproto.CodeInvalidPath},
		{"move onto existing", move("/etc/passwd", "/fifo"), agentproto.CodeAlreadyExists},
		{"mkdir over file", mkdir("/etc/passwd/x"), agentproto.CodeNotADirectory},
		{"remove non-empty", func() error { return c.Remove(ctx, agentproto.RemoveRequest{Path: "/etc"}) }, agentproto.CodeDirectoryNotEmpty},
		{"tar dot-dot", tarIn("/etc", reg("../pwned")), agentproto.CodeInvalidPath},
		{"tar dot-dot inside", tarIn("/etc", reg("a/../../pwned")), agentproto.CodeInvalidPath},
		{"tar absolute", tarIn("/etc", reg("/pwned")), agentproto.CodeInvalidPath},
		{"tar through existing symlink", tarIn("/", reg("abs_etc/pwned")), agentproto.CodeInvalidPath},
		{"tar through escaping symlink", tarIn("/", reg("rel_out/secret")), agentproto.CodeInvalidPath},
		{"tar device", tarIn("/etc", &tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}), agentproto.CodeUnsupportedFileType},
		{"tar fifo", tarIn("/etc", &tar.Header{Name: "p", Typeflag: tar.TypeFifo}), agentproto.CodeUnsupportedFileType},
		{"tar hard link out", tarIn("/etc", &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../final_out"}), agentproto.CodeInvalidPath},
	}
	for _, tc := range cases {
		wantCode(t, tc.name, tc.do(), tc.code)
	}
	if after := snapshot(t, filepath.Dir(root)); after != before {
		t.Errorf("refused requests changed the tree:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A symlink in the final component is removed or moved itself, never followed.
	if err := c.Move(ctx, agentproto.MoveRequest{From: "/final_out", To: "/moved"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, agentproto.RemoveRequest{Path: "/moved"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, agentproto.RemoveRequest{Path: "/abs_out", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(data) != "secret" {
		t.Errorf("outside file after removing links to it: %q, %v", data, err)
	}
}

// TestFilesMagicLink: with the real "/" as root, /proc/self/root is a magic
// link and RESOLVE_NO_MAGICLINKS refuses it.
func TestFilesMagicLink(t *testing.T) {
	t.Parallel()
	srv := newServer(t, agent.Options{})
	rec, _ := unixDialer(t, srv)
	c := newClient(t, rec.Dial)
	ctx := ctxT(t)
	if _, err := os.Stat("/proc/self/root/etc"); err != nil {
		t.Skip("no /proc")
	}
	_, err := c.Stat(ctx, "/proc/self/root/etc/hostname")
	wantCode(t, "stat through /proc/self/root", err, agentproto.CodeInvalidPath)
	_, _, err = c.ReadFile(ctx, "/proc/self/root/etc/hostname")
	wantCode(t, "read through /proc/self/root", err, agentproto.CodeInvalidPath)
}

func TestFilesBasics(t *testing.T) {
	t.Parallel()
	c, root, _ := filesAgent(t)
	ctx := ctxT(t)
	fi, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/a/b/c"})
	if err != nil || fi.Type != agentproto.FileTypeDirectory || fi.Path != "/a/b/c" {
		t.Fatalf("Mkdir = %+v, %v", fi, err)
	}
	if _, err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/a/b/c"}); err != nil {
		t.Fatalf("Mkdir again: %v", err)
	}
	fi, err = c.WriteFile(ctx, "/a/b/c/f.txt", 0o600, strings.NewReader("hello"))
	if err != nil || fi.Size != 5 || fi.Mode != 0o600 || fi.Type != agentproto.FileTypeFile {
		t.Fatalf("WriteFile = %+v, %v", fi, err)
	}
	fi, err = c.WriteFile(ctx, "/a/b/c/f.txt", -1, strings.NewReader("hello again"))
	if err != nil || fi.Size != 11 || fi.Mode != 0o600 {
		t.Fatalf("WriteFile (replace, keep mode) = %+v, %v", fi, err)
	}
	rc, size, err := c.ReadFile(ctx, "/a/b/c/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(data) != "hello again" || size != 11 {
		t.Fatalf("ReadFile = %q (size %d), %v", data, size, err)
	}
	if err := os.Symlink("f.txt", filepath.Join(root, "a/b/c/link")); err != nil {
		t.Fatal(err)
	}
	l, err := c.ListDir(ctx, "/a/b/c")
	if err != nil || len(l.Entries) != 2 || l.Entries[0].Name != "f.txt" || l.Entries[1].Type != agentproto.FileTypeSymlink || l.Entries[1].LinkTarget != "f.txt" {
		t.Fatalf("ListDir = %+v, %v", l, err)
	}
	if err := c.Move(ctx, agentproto.MoveRequest{From: "/a/b/c/f.txt", To: "/a/g.txt"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := c.Stat(ctx, "/a/g.txt"); err != nil || fi.Size != 11 {
		t.Fatalf("Stat after move = %+v, %v", fi, err)
	}
	if err := c.Remove(ctx, agentproto.RemoveRequest{Path: "/a", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Stat(ctx, "/a")
	wantCode(t, "stat removed", err, agentproto.CodeNotFound)
	if fi, err := c.Stat(ctx, "/"); err != nil || fi.Type != agentproto.FileTypeDirectory {
		t.Fatalf("Stat / = %+v, %v", fi, err)
	}
}

// TestFilesLargeStream: a large file goes up and comes back byte-identical
// while the heap stays flat (nothing buffers the whole file).
func TestFilesLargeStream(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	c, _, _ := filesAgent(t)
	ctx := ctxT(t)
	size := int64(256 << 20)
	if raceEnabled {
		size = 32 << 20
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	up := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), up)
	fi, err := c.WriteFile(ctx, "/big", -1, src)
	if err != nil || fi.Size != size {
		t.Fatalf("WriteFile = %+v, %v", fi, err)
	}
	rc, n, err := c.ReadFile(ctx, "/big")
	if err != nil || n != size {
		t.Fatalf("ReadFile: size %d, %v", n, err)
	}
	down := sha256.New()
	got, err := io.CopyBuffer(down, rc, make([]byte, 64<<10))
	rc.Close()
	close(stop)
	wg.Wait()
	if err != nil || got != size {
		t.Fatalf("download: %d bytes, %v", got, err)
	}
	if !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Fatal("downloaded content differs from the upload")
	}
	if grew := int64(peak.Load()) - int64(base.HeapInuse); grew > 48<<20 {
		t.Errorf("heap grew by %d MiB while streaming %d MiB", grew>>20, size>>20)
	}
}

func TestFilesTarRoundTrip(t *testing.T) {
	t.Parallel()
	c, root, _ := filesAgent(t)
	ctx := ctxT(t)
	src := filepath.Join(root, "src")
	writeFile(t, filepath.Join(src, "a.txt"), "alpha")
	writeFile(t, filepath.Join(src, "sub/deeper/b.bin"), strings.Repeat("\x00\x01", 100000))
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/deeper/b.bin", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "a.txt"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil { // skipped by tar out
		t.Fatal(err)
	}
	rc, err := c.TarOut(ctx, "/src")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.TarIn(ctx, "/dst/new", rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 6 || res.Bytes != 200005 {
		t.Errorf("TarIn = %+v, want 6 entries (a.txt, empty, link, sub, sub/deeper, b.bin) and 200005 bytes", res)
	}
	if err := os.Remove(filepath.Join(src, "fifo")); err != nil {
		t.Fatal(err)
	}
	strip := func(s, prefix string) string { return strings.ReplaceAll(s, prefix, "") }
	if a, b := strip(snapshot(t, src), src), strip(snapshot(t, filepath.Join(root, "dst/new")), filepath.Join(root, "dst/new")); a != b {
		t.Errorf("tree differs after the round trip:\n%s\nvs\n%s", a, b)
	}
	if st, err := os.Stat(filepath.Join(root, "dst/new/a.txt")); err != nil || st.Mode().Perm() != 0o751 {
		t.Errorf("mode after round trip: %v, %v", st.Mode(), err)
	}
}

func TestFilesWatch(t *testing.T) {
	t.Parallel()
	c, root, _ := filesAgent(t)
	ctx := ctxT(t)
	if err := os.Mkdir(filepath.Join(root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ws, err := c.Watch(ctx, "/w")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	writeFile(t, filepath.Join(root, "w/f"), "x")
	if err := os.Rename(filepath.Join(root, "w/f"), filepath.Join(root, "w/g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "w/g")); err != nil {
		t.Fatal(err)
	}
	want := []agentproto.FileEvent{
		{Type: agentproto.FileEventCreate, Path: "/w/f"},
		{Type: agentproto.FileEventWrite, Path: "/w/f"},
		{Type: agentproto.FileEventRename, From: "/w/f", Path: "/w/g"},
		{Type: agentproto.FileEventRemove, Path: "/w/g"},
	}
	for i := 0; i < len(want); {
		ev, err := ws.Next()
		if err != nil {
			t.Fatalf("after %d events: %v", i, err)
		}
		if ev == want[i] {
			i++
		} else if ev.Type != agentproto.FileEventWrite {
			t.Fatalf("event %+v, want %+v", ev, want[i])
		}
	}
	if err := os.Remove(filepath.Join(root, "w")); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := ws.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = ev
	}
}
