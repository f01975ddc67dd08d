package api

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlockdev/airlock/internal/apiv1"
	"github.com/airlockdev/airlock/internal/model"
)

// testImage is a two-layer linux image for this host's architecture; the
// second layer replaces a file of the first.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	layer := func(files ...string) v1.Layer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := 0; i+1 < len(files); i += 2 {
			if err := tw.WriteHeader(&tar.Header{Name: files[i], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[i+1]))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(files[i+1])); err != nil {
				t.Fatal(err)
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
	img, err := mutate.AppendLayers(empty.Image,
		layer("etc/os-release", "ID=imgtest\n", "srv/greeting", "old\n"),
		layer("srv/greeting", "hello from the image\n"))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Env: []string{"GREETING=hi"}, WorkingDir: "/srv"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// testRegistry serves an in-process registry on loopback and returns its
// host:port.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func importSource(e *testEnv, t *testing.T, source, tplName string) apiv1.Template {
	t.Helper()
	body := fmt.Sprintf(`{"source": %q}`, source)
	if tplName != "" {
		body = fmt.Sprintf(`{"source": %q, "name": %q}`, source, tplName)
	}
	b := e.importWait(t, body, model.BuildSucceeded)
	var tl apiv1.TemplateList
	e.do("GET", "/v1/templates", e.admin, "").want(t, http.StatusOK).decode(t, &tl)
	for _, tpl := range tl.Templates {
		if tpl.Digest == b.Digest {
			return tpl
		}
	}
	t.Fatalf("build %s made template %s, which is not listed", b.ID, b.Digest)
	return apiv1.Template{}
}

// TestImportImageSources: the same image imported from a registry, an OCI
// layout and a docker archive gives one template digest.
func TestImportImageSources(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	img := testImage(t)
	host := testRegistry(t)
	ref, err := name.ParseReference(host + "/airlock/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "img.tar")
	if err := tarball.WriteToFile(archive, ref.(name.Tag), img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}

	fromRegistry := importSource(e, t, host+"/airlock/img:v1", "from-registry")
	if fromRegistry.Digest == e.digest.String() || len(fromRegistry.Names) != 1 || fromRegistry.Names[0] != "from-registry:latest" {
		t.Fatalf("imported %+v", fromRegistry)
	}
	for _, src := range []string{
		host + "/airlock/img@" + digest.String(),
		"docker://" + host + "/airlock/img:v1",
		"oci-layout:" + filepath.Join(dir, "layout"),
		"docker-archive:" + archive,
	} {
		got := importSource(e, t, src, "")
		if got.Digest != fromRegistry.Digest {
			t.Errorf("%s: digest %s, from the registry %s", src, got.Digest, fromRegistry.Digest)
		}
	}
	// The template holds the image's files, upper layers winning.
	d, err := model.ParseTemplateDigest(fromRegistry.Digest)
	if err != nil {
		t.Fatal(err)
	}
	tree := e.tpl.RootfsDir(d)
	for rel, want := range map[string]string{"srv/greeting": "hello from the image\n", "etc/os-release": "ID=imgtest\n"} {
		if got, err := os.ReadFile(filepath.Join(tree, rel)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", rel, got, err, want)
		}
	}
	// A sandbox can be created from it by name.
	var sb apiv1.SandboxWithOperation
	e.do("POST", "/v1/sandboxes", e.keyA, `{"template": "from-registry"}`).want(t, http.StatusAccepted).decode(t, &sb)
	if sb.Sandbox.Template != fromRegistry.Digest {
		t.Fatalf("sandbox template %s, want %s", sb.Sandbox.Template, fromRegistry.Digest)
	}
}

// TestImportImageErrors: bad references and registry failures give stable
// errors and record nothing.
func TestImportImageErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	host := testRegistry(t)
	// A loopback port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cases := []struct {
		name, source string
		invalid      bool // the OpenAPI document rejects it
		status       int
		code         string
		msg          string
	}{
		{"relative path", "rootfs", true, 400, apiv1.CodeInvalidRequest, "image reference"},
		{"docker hub short name", "alpine:3.20", true, 400, apiv1.CodeInvalidRequest, "registry host"},
		{"unclean path", "/a/../b", false, 400, apiv1.CodeInvalidRequest, "clean absolute"},
		{"relative oci layout", "oci-layout:layout/dir", false, 400, apiv1.CodeInvalidRequest, "clean absolute"},
		{"unclean docker archive", "docker-archive:/a/./b.tar", false, 400, apiv1.CodeInvalidRequest, "clean absolute"},
		{"empty oci layout", "oci-layout:", true, 400, apiv1.CodeInvalidRequest, "clean absolute"},
		{"bad tag", host + "/airlock/img:bad:tag", false, 400, apiv1.CodeInvalidRequest, "image reference"},
		{"upper-case repository", host + "/Airlock/img:v1", false, 400, apiv1.CodeInvalidRequest, "image reference"},
		{"unsupported transport", "oci-archive:/srv/img.tar", false, 400, apiv1.CodeInvalidRequest, "unsupported transport"},
		{"missing oci layout", "oci-layout:" + filepath.Join(dir, "none"), false, 400, apiv1.CodeInvalidRequest, "does not exist"},
		{"missing docker archive", "docker-archive:" + filepath.Join(dir, "none.tar"), false, 400, apiv1.CodeInvalidRequest, "does not exist"},
	}
	// Found out by the build, which fails with the error.
	failing := []struct{ name, source, code, msg string }{
		{"unknown image", host + "/airlock/none:v1", apiv1.CodeInvalidRequest, "registry answered 404 (NAME_UNKNOWN)"},
		{"unreachable registry", closed + "/airlock/img:v1", apiv1.CodeRegistryUnavailable, "could not be reached"},
		{"not a tree", e.tplDir + "/etc/motd", apiv1.CodeInvalidRequest, ""},
	}
	before := e.dump()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.send(req{method: "POST", path: "/v1/templates", key: e.admin, body: fmt.Sprintf(`{"source": %q, "name": "x"}`, c.source), invalid: c.invalid, t: t})
			r.wantError(t, c.status, c.code)
			var er apiv1.Error
			r.decode(t, &er)
			t.Logf("%s: %s", c.source, er.Message)
			if !strings.Contains(er.Message, c.msg) {
				t.Errorf("message %q does not mention %q", er.Message, c.msg)
			}
		})
	}
	if after := e.dump(); after != before {
		t.Errorf("failed imports changed the store:\nbefore %s\nafter  %s", before, after)
	}
	for _, c := range failing {
		t.Run(c.name, func(t *testing.T) {
			b := e.importWait(t, fmt.Sprintf(`{"source": %q, "name": "x"}`, c.source), model.BuildFailed)
			if b.Error == nil || b.Error.Code != c.code || !strings.Contains(b.Error.Message, c.msg) {
				t.Errorf("build error %+v, want %s mentioning %q", b.Error, c.code, c.msg)
			}
		})
	}
	e.do("POST", "/v1/sandboxes", e.keyA, `{"template": "x"}`).wantError(t, http.StatusFailedDependency, apiv1.CodeBuildFailed)
}
