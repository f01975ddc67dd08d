package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// layeredImage is an image whose layers exercise whiteouts, opaque
// directories, type changes, hard links, symlinks, modes, ownership and
// extended attributes.
func layeredImage(t testing.TB) v1.Image {
	lower := makeTar(t,
		dirEntry("bin/"),
		withMode(withXattrs(reg("bin/ping", "ping-binary"), "security.capability", string(capSet(13))), 0o755, 0, 0),
		symlinkEntry("bin/sh", "ping"),
		dirEntry("etc/"),
		reg("etc/passwd", "root:x:0:0::/root:/bin/sh\n"),
		withMode(reg("etc/secret", "s"), 0o600, 0, 42),
		reg("gone", "whited out"),
		dirEntry("gonedir/"), reg("gonedir/a", "a"), dirEntry("gonedir/sub/"), reg("gonedir/sub/b", "b"),
		dirEntry("opq/"), reg("opq/lower", "l"), dirEntry("opq/lowerdir/"), reg("opq/lowerdir/x", "x"),
		dirEntry("opq2/"), reg("opq2/lower", "l"),
		dirEntry("hard/"), reg("hard/orig", "linked"), hardlinkEntry("hard/link", "hard/orig"),
		withMode(reg("suid", "s"), 0o4755, 1000, 1000),
		withXattrs(dirEntry("data/"), "user.airlock.test", "dir-value", "security.selinux", "host_label_t", "trusted.overlay.opaque", "y"),
		withXattrs(dirEntry("data2/"), "user.a", "1"),
		dirEntry("dir-to-file/"), reg("dir-to-file/inner", "i"),
		reg("file-to-dir", "f"),
		dirEntry("same/"),
	)
	upper := makeTar(t,
		whiteoutEntry(".wh.gone"),
		whiteoutEntry(".wh.gonedir"),
		whiteoutEntry(".wh.never-existed"),
		whiteoutEntry("nodir/.wh.x"),
		dirEntry("opq/"), whiteoutEntry("opq/.wh..wh..opq"), reg("opq/new", "n"),
		dirEntry("opq2/"), reg("opq2/new", "n"), whiteoutEntry("opq2/.wh..wh..opq"), // marker after the entry
		reg("etc/passwd", "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"),
		hardlinkEntry("hard/link2", "hard/orig"),
		reg("dir-to-file", "now a file"),
		dirEntry("file-to-dir/"), reg("file-to-dir/x", "x"),
		reg("same/x", "kept"), whiteoutEntry("same/.wh.x"), // same-layer whiteout hides nothing
		withXattrs(dirEntry("data2/"), "user.b", "2"),
		whiteoutEntry(".wh..wh.plnk"), // AUFS metadata, ignored
	)
	cfg := v1.Config{
		Env:        []string{"FOO=bar"},
		WorkingDir: "/srv/app/",
		User:       "1000:1000",
		Entrypoint: []string{"/bin/ping"},
		Cmd:        []string{"-c", "1", "127.0.0.1"},
	}
	return imageOf(t, "", cfg, lower, upper)
}

// wantLayered is the tree layeredImage must give: path -> description.
func wantLayered() map[string]string {
	return map[string]string{
		".":             "d 0755 0:0",
		"bin":           "d 0755 0:0",
		"bin/ping":      "f 0755 0:0 ping-binary",
		"bin/sh":        "l -> ping",
		"data":          "d 0755 0:0",
		"data2":         "d 0755 0:0",
		"dir-to-file":   "f 0644 0:0 now a file",
		"etc":           "d 0755 0:0",
		"etc/passwd":    "f 0644 0:0 root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
		"etc/secret":    "f 0600 0:42 s",
		"file-to-dir":   "d 0755 0:0",
		"file-to-dir/x": "f 0644 0:0 x",
		"hard":          "d 0755 0:0",
		"hard/link":     "f 0644 0:0 linked",
		"hard/link2":    "f 0644 0:0 linked",
		"hard/orig":     "f 0644 0:0 linked",
		"opq":           "d 0755 0:0",
		"opq/new":       "f 0644 0:0 n",
		"opq2":          "d 0755 0:0",
		"opq2/new":      "f 0644 0:0 n",
		"same":          "d 0755 0:0",
		"same/x":        "f 0644 0:0 kept",
		"suid":          "f 4755 1000:1000 s",
	}
}

// describeTree returns path -> description of every entry under root.
func describeTree(t testing.TB, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		perm := func() string { return fmt.Sprintf("%04o", st.Mode&0o7777) }
		ids := fmt.Sprintf("%d:%d", st.Uid, st.Gid)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			got[rel] = "d " + perm() + " " + ids
		case syscall.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = "f " + perm() + " " + ids + " " + string(data)
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = "l -> " + target
		default:
			got[rel] = "other"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func getxattr(t testing.TB, p, attr string) ([]byte, error) {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Lgetxattr(p, attr, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func checkLayeredTree(t *testing.T, root string) {
	t.Helper()
	got, want := describeTree(t, root), wantLayered()
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s = %q, want %q", p, got[p], w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected %s (%q)", p, g)
		}
	}
	if v, err := getxattr(t, filepath.Join(root, "bin/ping"), "security.capability"); err != nil || !bytes.Equal(v, capSet(13)) {
		t.Errorf("bin/ping security.capability = %x, %v; want %x", v, err, capSet(13))
	}
	if v, err := getxattr(t, filepath.Join(root, "data"), "user.airlock.test"); err != nil || string(v) != "dir-value" {
		t.Errorf("data user.airlock.test = %q, %v", v, err)
	}
	for _, attr := range []string{"trusted.overlay.opaque", "security.selinux"} {
		if v, err := getxattr(t, filepath.Join(root, "data"), attr); err == nil && attr != "security.selinux" {
			t.Errorf("data %s = %q, want it dropped", attr, v)
		} else if err == nil && string(v) == "host_label_t" {
			t.Errorf("data %s was copied from the image", attr)
		}
	}
	if _, err := getxattr(t, filepath.Join(root, "data2"), "user.a"); !errors.Is(err, unix.ENODATA) {
		t.Errorf("data2 user.a of the lower layer: %v, want it replaced by the upper layer's attributes", err)
	}
	if v, err := getxattr(t, filepath.Join(root, "data2"), "user.b"); err != nil || string(v) != "2" {
		t.Errorf("data2 user.b = %q, %v", v, err)
	}
	var a, b, c syscall.Stat_t
	for p, st := range map[string]*syscall.Stat_t{"hard/orig": &a, "hard/link": &b, "hard/link2": &c} {
		if err := syscall.Lstat(filepath.Join(root, p), st); err != nil {
			t.Fatal(err)
		}
	}
	if a.Ino != b.Ino || a.Ino != c.Ino || a.Nlink != 3 {
		t.Errorf("hard/{orig,link,link2} are not one inode with 3 links: %d %d %d nlink %d", a.Ino, b.Ino, c.Ino, a.Nlink)
	}
}

func TestImportImageFromEverySource(t *testing.T) {
	ctx := context.Background()
	s, tmp := newStore(t)
	img := layeredImage(t)
	host := serveRegistry(t, nil)
	refs := []string{
		pushImage(t, host, "airlock/layered:v1", img),
		"oci-layout:" + writeLayout(t, filepath.Join(tmp, "layout"), img),
		"docker-archive:" + writeDockerArchive(t, filepath.Join(tmp, "image.tar"), img),
	}
	var first Imported
	for i, r := range refs {
		imp, err := s.ImportImage(ctx, mustRef(t, r), ImageOptions{}, nil)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if i == 0 {
			first = imp
			if imp.Reused {
				t.Errorf("%s: first import reported Reused", r)
			}
			checkLayeredTree(t, s.RootfsDir(imp.Digest))
			if err := s.Verify(ctx, imp.Digest); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if imp.Digest != first.Digest || !imp.Reused {
			t.Errorf("%s: digest %s (reused %v), want %s from %s, reused", r, imp.Digest, imp.Reused, first.Digest, refs[0])
		}
	}
	m, err := ParseManifest(first.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Env:        []string{"FOO=bar", DefaultConfig().Env[0]},
		WorkingDir: "/srv/app",
		User:       "1000:1000",
		Entrypoint: []string{"/bin/ping"},
		Cmd:        []string{"-c", "1", "127.0.0.1"},
	}
	if !slices.Equal(m.Config.Env, want.Env) || m.Config.WorkingDir != want.WorkingDir || m.Config.User != want.User ||
		!slices.Equal(m.Config.Entrypoint, want.Entrypoint) || !slices.Equal(m.Config.Cmd, want.Cmd) {
		t.Errorf("config = %+v, want %+v", m.Config, want)
	}

	// A fresh store builds the same digest from the docker archive alone.
	s2, _ := newStore(t)
	imp, err := s2.ImportImage(ctx, mustRef(t, refs[2]), ImageOptions{}, nil)
	if err != nil || imp.Digest != first.Digest || imp.Reused {
		t.Errorf("fresh store: %+v, %v; want %s", imp, err, first.Digest)
	}
}

// File capabilities are part of the template: in its digest, checked by
// Verify.
func TestImageCapabilitiesAreInTheDigest(t *testing.T) {
	ctx := context.Background()
	s, tmp := newStore(t)
	build := func(caps ...string) v1.Image {
		e := withMode(reg("ping", "binary"), 0o755, 0, 0)
		if len(caps) > 0 {
			e = withXattrs(e, caps...)
		}
		return imageOf(t, "", v1.Config{}, makeTar(t, e))
	}
	var digests []model.TemplateDigest
	for _, img := range []v1.Image{build(), build("security.capability", string(capSet(13))), build("security.capability", string(capSet(12)))} {
		imp, err := importLayout(t, s, tmp, img)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, imp.Digest)
	}
	if digests[0] == digests[1] || digests[1] == digests[2] || digests[0] == digests[2] {
		t.Fatalf("capabilities do not change the digest: %v", digests)
	}
	// Dropping the capability from the stored tree is corruption.
	p := filepath.Join(s.RootfsDir(digests[1]), "ping")
	if err := unix.Removexattr(p, "security.capability"); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, digests[1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Verify after removing the capability = %v, want ErrCorrupt", err)
	}
}

func TestImageMultiPlatform(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	foreign := "s390x"
	if foreign == hostPlatform().Architecture {
		foreign = "arm64"
	}
	marker := func(arch string) v1.Image {
		return imageOf(t, arch, v1.Config{}, makeTar(t, reg("arch", arch)))
	}
	add := func(idx v1.ImageIndex, arch string) v1.ImageIndex {
		return mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        marker(arch),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	host := serveRegistry(t, nil)
	both := pushIndex(t, host, "multi/both:v1", add(add(empty.Index, foreign), hostPlatform().Architecture))
	imp, err := s.ImportImage(ctx, mustRef(t, both), ImageOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(s.RootfsDir(imp.Digest), "arch")); string(got) != hostPlatform().Architecture {
		t.Errorf("picked the image for %q, want %s", got, hostPlatform().Architecture)
	}

	only := pushIndex(t, host, "multi/foreign:v1", add(empty.Index, foreign))
	_, err = s.ImportImage(ctx, mustRef(t, only), ImageOptions{}, nil)
	if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "linux/"+hostPlatform().Architecture) ||
		!strings.Contains(err.Error(), "linux/"+foreign) {
		t.Errorf("foreign-only index: %v, want ErrInvalid naming both platforms", err)
	}
	single := pushImage(t, host, "single/foreign:v1", marker(foreign))
	_, err = s.ImportImage(ctx, mustRef(t, single), ImageOptions{}, nil)
	if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "linux/"+foreign) {
		t.Errorf("foreign image: %v, want ErrInvalid naming its platform", err)
	}
}

func TestImageConfigMapping(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      v1.Config
		want    Config
		wantErr bool
	}{
		{name: "empty", in: v1.Config{}, want: DefaultConfig()},
		{name: "own PATH kept", in: v1.Config{Env: []string{"PATH=/opt/bin", "A=b"}},
			want: Config{Env: []string{"PATH=/opt/bin", "A=b"}, WorkingDir: "/"}},
		{name: "workdir cleaned", in: v1.Config{WorkingDir: "/a/../b//c/"},
			want: Config{Env: DefaultConfig().Env, WorkingDir: "/b/c"}},
		{name: "relative workdir", in: v1.Config{WorkingDir: "app"}, wantErr: true},
		{name: "env without =", in: v1.Config{Env: []string{"JUSTNAME"}}, wantErr: true},
		{name: "NUL in cmd", in: v1.Config{Cmd: []string{"a\x00b"}}, wantErr: true},
		{name: "control byte in user", in: v1.Config{User: "root\n"}, wantErr: true},
		{name: "huge cmd", in: v1.Config{Cmd: []string{strings.Repeat("x", maxConfigArgBytes+1)}}, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := configFromImage(c.in)
			if c.wantErr {
				if !errors.Is(err, model.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Env, c.want.Env) || got.WorkingDir != c.want.WorkingDir || got.User != c.want.User ||
				!slices.Equal(got.Cmd, c.want.Cmd) || !slices.Equal(got.Entrypoint, c.want.Entrypoint) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// Images as go-containerregistry generates them (random layers, gzip and
// zstd) give one digest from all three sources.
func TestImportGeneratedImages(t *testing.T) {
	ctx := context.Background()
	rnd, err := random.Image(4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	zl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(makeTar(t, reg("z", "zstd layer")))), nil
	}, tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	zstdImg := imageWithLayers(t, "", v1.Config{}, layerOf(t, makeTar(t, reg("g", "gzip layer"))), zl)
	host := serveRegistry(t, nil)
	for name, img := range map[string]v1.Image{"random": rnd, "zstd": zstdImg} {
		t.Run(name, func(t *testing.T) {
			s, tmp := newStore(t)
			var digests []model.TemplateDigest
			for _, r := range []string{
				pushImage(t, host, "gen/"+name+":v1", img),
				"oci-layout:" + writeLayout(t, filepath.Join(tmp, "layout"), img),
				"docker-archive:" + writeDockerArchive(t, filepath.Join(tmp, "image.tar"), img),
			} {
				imp, err := s.ImportImage(ctx, mustRef(t, r), ImageOptions{}, nil)
				if err != nil {
					t.Fatalf("%s: %v", r, err)
				}
				digests = append(digests, imp.Digest)
			}
			if digests[0] != digests[1] || digests[0] != digests[2] {
				t.Errorf("digests differ by source: %v", digests)
			}
			if err := s.Verify(ctx, digests[0]); err != nil {
				t.Fatal(err)
			}
		})
	}
}
