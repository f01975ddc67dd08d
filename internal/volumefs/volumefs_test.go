package volumefs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// volume makes a root, its staging directory and, beside the root, an
// "outside" directory with a secret an escape would reach.
func volume(t *testing.T) (r *Root, root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "data"), filepath.Join(base, "outside")
	staging := filepath.Join(base, "staging")
	for _, d := range []string{root, outside, staging} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(root, staging)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, root, outside
}

func vp(t *testing.T, s string) model.VolumeFilePath {
	t.Helper()
	p, err := model.ParseVolumeFilePath(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readAll(t *testing.T, r *Root, p string) (string, error) {
	t.Helper()
	f, _, err := r.OpenFile(vp(t, p))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

func TestRoundTrip(t *testing.T) {
	r, root, _ := volume(t)
	mode := uint32(0o600)
	e, err := r.WriteFile(vp(t, "/a/b/c.txt"), strings.NewReader("hello"), WriteOptions{Owner: Owner{Mode: &mode}, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != TypeFile || e.Size != 5 || e.Mode != 0o600 || e.Name != "c.txt" || e.Path != "/a/b/c.txt" {
		t.Fatalf("write: %+v", e)
	}
	if got, err := readAll(t, r, "/a/b/c.txt"); err != nil || got != "hello" {
		t.Fatalf("read: %q, %v", got, err)
	}
	if _, err := r.WriteFile(vp(t, "/a/b/c.txt"), strings.NewReader("x"), WriteOptions{NoReplace: true, MaxBytes: 10}); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("write without replace over a file: %v", err)
	}
	if _, err := r.WriteFile(vp(t, "/a/b/c.txt"), strings.NewReader("0123456789!"), WriteOptions{MaxBytes: 10}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("write over its bound: %v", err)
	}
	if got, _ := readAll(t, r, "/a/b/c.txt"); got != "hello" {
		t.Fatalf("a refused write changed the file: %q", got)
	}
	if _, err := r.WriteFile(vp(t, "/a/b"), strings.NewReader("x"), WriteOptions{MaxBytes: 10}); !errors.Is(err, unix.EISDIR) {
		t.Fatalf("write over a directory: %v", err)
	}
	if _, err := r.Mkdir(vp(t, "/x/y/z"), Owner{}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mkdir(vp(t, "/x/y/z"), Owner{}, true); err != nil {
		t.Fatalf("mkdir -p of an existing directory: %v", err)
	}
	if _, err := r.Mkdir(vp(t, "/q/r"), Owner{}, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("mkdir without parents: %v", err)
	}
	list, trunc, err := r.List(vp(t, "/"), 3)
	if err != nil || trunc {
		t.Fatal(err, trunc)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, string(e.Path))
	}
	for _, want := range []string{"/a", "/a/b", "/a/b/c.txt", "/x", "/x/y", "/x/y/z"} {
		if !strings.Contains(" "+strings.Join(paths, " ")+" ", " "+want+" ") {
			t.Errorf("list of depth 3 lacks %s: %v", want, paths)
		}
	}
	if _, err := r.Rename(vp(t, "/a/b/c.txt"), vp(t, "/x/moved"), false); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(vp(t, "/x"), false); !errors.Is(err, unix.ENOTEMPTY) {
		t.Fatalf("remove a full directory without recursive: %v", err)
	}
	if err := r.Remove(vp(t, "/x"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stat(vp(t, "/x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat after remove: %v", err)
	}
	if err := r.Remove(vp(t, "/"), true); !errors.Is(err, ErrRoot) {
		t.Fatalf("remove the root: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(filepath.Dir(root), "staging")); len(left) != 0 {
		t.Fatalf("staging keeps %d files", len(left))
	}
}

// TestEscapes: no path or symlink of the volume reaches outside it, for
// each operation. Each case fails if lookups are not confined to the root.
func TestEscapes(t *testing.T) {
	r, root, outside := volume(t)
	links := map[string]string{
		"dotdot":  "../outside",
		"abs":     outside,
		"deep":    "a/../../../../../../../" + strings.TrimPrefix(outside, "/"),
		"procfd":  "/proc/self/root" + outside,
		"selfcwd": "/proc/self/cwd",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range links {
		t.Run(name, func(t *testing.T) {
			if got, err := readAll(t, r, "/"+name+"/secret"); err == nil || strings.Contains(got, "host secret") {
				t.Errorf("read through %s: %q, %v (want an error)", name, got, err)
			}
			if _, err := r.Stat(vp(t, "/"+name+"/secret")); err == nil {
				t.Errorf("stat through %s found the outside secret", name)
			}
			if l, _, err := r.List(vp(t, "/"+name), 1); err == nil {
				for _, e := range l {
					if e.Name == "secret" {
						t.Errorf("list through %s shows the outside secret", name)
					}
				}
			}
			if _, err := r.WriteFile(vp(t, "/"+name+"/planted"), strings.NewReader("x"), WriteOptions{MaxBytes: 10}); err == nil {
				if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
					t.Errorf("write through %s planted a file outside", name)
				}
			}
			_ = r.Remove(vp(t, "/"+name+"/secret"), true)
			_, _ = r.Rename(vp(t, "/"+name+"/secret"), vp(t, "/stolen"), true)
			_, _ = r.Mkdir(vp(t, "/"+name+"/newdir"), Owner{}, true)
			mode := uint32(0o777)
			_, _ = r.SetMetadata(vp(t, "/"+name+"/secret"), Owner{Mode: &mode})
			st, err := os.Stat(filepath.Join(outside, "secret"))
			if err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("the outside secret was removed, moved or changed through %s: %v %v", name, st, err)
			}
			if _, err := os.Lstat(filepath.Join(outside, "newdir")); err == nil {
				t.Errorf("mkdir through %s made a directory outside", name)
			}
		})
	}
	// A write whose parent is an absolute symlink lands inside the root,
	// where the symlink points taken from the root.
	if err := os.Mkdir(filepath.Join(root, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/inner", filepath.Join(root, "toinner")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteFile(vp(t, "/toinner/f"), strings.NewReader("in"), WriteOptions{MaxBytes: 10}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "inner", "f")); err != nil || string(b) != "in" {
		t.Fatalf("write through an absolute symlink: %q, %v", b, err)
	}
}

// TestSymlinkRace: while reads run, a directory of the volume is swapped
// again and again for a symlink to the outside; no read reaches it.
func TestSymlinkRace(t *testing.T) {
	r, root, outside := volume(t)
	dir := filepath.Join(root, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		link := filepath.Join(root, "d-link")
		if err := os.Symlink(outside, link); err != nil {
			t.Error(err)
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			// d is the directory, then a symlink to the outside, then
			// the directory again.
			_ = unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
			_ = unix.Renameat2(unix.AT_FDCWD, link, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
		}
	}()
	deadline := time.Now().Add(time.Second)
	reads := 0
	for time.Now().Before(deadline) {
		if got, err := readAll(t, r, "/d/secret"); err == nil && bytes.Contains([]byte(got), []byte("host")) {
			close(stop)
			wg.Wait()
			t.Fatalf("read %d reached the outside: %q", reads, got)
		}
		reads++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads while the directory was swapped", reads)
}

func TestOwnerBounds(t *testing.T) {
	r, _, _ := volume(t)
	big, mode := uint32(70000), uint32(0o10777)
	if _, err := r.WriteFile(vp(t, "/f"), strings.NewReader(""), WriteOptions{Owner: Owner{UID: &big}, MaxBytes: 1}); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("uid over 65535: %v", err)
	}
	if _, err := r.Mkdir(vp(t, "/d"), Owner{Mode: &mode}, true); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("mode with file-type bits: %v", err)
	}
	uid, gid := uint32(1000), uint32(1001)
	e, err := r.WriteFile(vp(t, "/f"), strings.NewReader("x"), WriteOptions{Owner: Owner{UID: &uid, GID: &gid}, MaxBytes: 1})
	if err != nil || e.UID != 1000 || e.GID != 1001 || e.Mode != 0o644 {
		t.Fatalf("owned write: %+v, %v", e, err)
	}
	if err := unix.Mkfifo(filepath.Join(r.rootPath(t), "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.OpenFile(vp(t, "/fifo")); !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("read of a FIFO: %v", err)
	}
}

// rootPath is the path of r's root (tests).
func (r *Root) rootPath(t *testing.T) string {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(r.root))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
