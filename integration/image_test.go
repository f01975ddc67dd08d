package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/staticelf"
)

// staticBusybox returns the host's statically linked busybox, or skips.
func staticBusybox(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(airtest.BusyboxPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := staticelf.Check(data); err != nil {
		t.Skipf("the host's busybox is not a static executable: %v", err)
	}
	return data
}

// tarLayer is a layer of the entries: a name ending in "/" is a directory,
// "->target" content a symlink, anything else a regular file.
func tarLayer(t *testing.T, entries ...[2]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1704067200, 0)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], ModTime: mtime, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(e[1]))}
		switch {
		case strings.HasSuffix(e[0], "/"):
			h.Typeflag, h.Size = tar.TypeDir, 0
		case strings.HasPrefix(e[1], "->"):
			h.Typeflag, h.Linkname, h.Size, h.Mode = tar.TypeSymlink, e[1][2:], 0, 0o777
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// busyboxImage is an image of the host's busybox userland (with
// /srv/greeting "from the lower layer") and the layers given over it.
func busyboxImage(t *testing.T, upper ...v1.Layer) v1.Image {
	t.Helper()
	bb := staticBusybox(t)
	base := tarLayer(t,
		[2]string{"bin/", ""}, [2]string{"bin/busybox", string(bb)}, [2]string{"bin/sh", "->busybox"},
		[2]string{"bin/cat", "->busybox"}, [2]string{"etc/", ""},
		[2]string{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"}, [2]string{"etc/group", "root:x:0:\n"},
		[2]string{"dev/", ""}, [2]string{"proc/", ""}, [2]string{"sys/", ""}, [2]string{"tmp/", ""},
		[2]string{"root/", ""}, [2]string{"run/", ""},
		[2]string{".airlock/", ""}, [2]string{".airlock/bin/", ""}, [2]string{".airlock/run/", ""},
		[2]string{"srv/", ""}, [2]string{"srv/greeting", "from the lower layer\n"})
	return linuxImage(t, v1.Config{Env: []string{"PATH=/bin"}}, append([]v1.Layer{base}, upper...)...)
}

// linuxImage is an image of the layers for linux on this architecture,
// with cfg as its config.
func linuxImage(t *testing.T, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImportImageFromRegistry: `airlock template import` pulls an image from
// a loopback registry, and a sandbox created from it runs the image's files.
func TestImportImageFromRegistry(t *testing.T) {
	airtest.RequireRoot(t)
	airtest.RequireBinary(t, "runc")
	// A two-layer image: a busybox userland, then the content to find (the
	// upper layer replaces a file of the lower).
	img := busyboxImage(t, tarLayer(t, [2]string{"srv/greeting", "hello from the OCI image\n"}))

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	refStr := u.Host + "/airlock/busybox-test:v1"
	ref, err := name.ParseReference(refStr)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}

	s := newServer(t, build(t), serverConfig{runtime: "runc"})
	s.start()
	ctx := ctxFor(t, 3*time.Minute)

	stdout, stderr, code := s.cli(ctx, "-o", "json", "template", "import", refStr, "--name", "imgtest")
	if code != 0 {
		t.Fatalf("template import %s: exit %d\n%s\n%s", refStr, code, stdout, stderr)
	}
	var tpl apiv1.Build
	if err := json.Unmarshal([]byte(stdout), &tpl); err != nil || tpl.Name != "imgtest:latest" || tpl.State != "succeeded" || tpl.Digest == "" {
		t.Fatalf("template import: %v %q", err, stdout)
	}
	// A missing image is a clear error, not a crash.
	_, stderr, code = s.cli(ctx, "template", "import", u.Host+"/airlock/none:v1")
	if code == 0 || !strings.Contains(stderr, "invalid_request") {
		t.Errorf("import of a missing image: exit %d, stderr %q", code, stderr)
	}

	stdout, stderr, code = s.cli(ctx, "-o", "json", "sandbox", "create", "--template", "imgtest")
	if code != 0 {
		t.Fatalf("sandbox create --template imgtest: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var created apiv1.SandboxWithOperation
	if err := json.Unmarshal([]byte(stdout), &created); err != nil || created.Sandbox.Template != tpl.Digest {
		t.Fatalf("sandbox create: %v, template %q, want %q (%s)", err, created.Sandbox.Template, tpl.Digest, stdout)
	}
	sb := created.Sandbox
	stdout, stderr, code = s.cli(ctx, "exec", sb.ID, "--", "/bin/sh", "-c", "cat /srv/greeting; ls /bin")
	if code != 0 || !strings.HasPrefix(stdout, "hello from the OCI image\n") || !strings.Contains(stdout, "busybox") {
		t.Fatalf("exec in the image's sandbox: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, stderr, code = s.cli(ctx, "sandbox", "delete", sb.ID); code != 0 {
		t.Errorf("sandbox delete: exit %d %s", code, stderr)
	}
}
