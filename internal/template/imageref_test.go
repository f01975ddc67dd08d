package template

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
	"github.com/airlockdev/airlock/internal/textclip"
)

func TestParseImageRef(t *testing.T) {
	for _, c := range []struct {
		in     string
		source ImageSource
		str    string // String(); "" means the input
		path   string
	}{
		{in: "registry.example:5000/team/app:v1", source: ImageRegistry},
		{in: "localhost:5000/app@sha256:" + strings.Repeat("ab", 32), source: ImageRegistry},
		{in: "alpine", source: ImageRegistry, str: "index.docker.io/library/alpine:latest"},
		{in: "r.example/a__b/c-d---e/f.g_h:v1", source: ImageRegistry},
		{in: "docker://ghcr.io/o/r:t", source: ImageRegistry, str: "ghcr.io/o/r:t"},
		{in: "oci-layout:/srv/images/app", source: ImageOCILayout, path: "/srv/images/app"},
		{in: "oci-layout:./rel//dir/", source: ImageOCILayout, str: "oci-layout:rel/dir", path: "rel/dir"},
		{in: "oci-layout:/with:colon@and-at", source: ImageOCILayout, path: "/with:colon@and-at"},
		{in: "docker-archive:/tmp/app.tar", source: ImageDockerArchive, path: "/tmp/app.tar"},
	} {
		t.Run(c.in, func(t *testing.T) {
			r, err := ParseImageRef(c.in)
			if err != nil {
				t.Fatal(err)
			}
			want := c.str
			if want == "" {
				want = c.in
			}
			if r.Source() != c.source || r.String() != want || r.Path() != c.path {
				t.Errorf("= %v %q path %q, want %v %q path %q", r.Source(), r.String(), r.Path(), c.source, want, c.path)
			}
		})
	}
	for _, in := range []string{
		"", "oci-layout:", "docker-archive:", "oci:/dir", "oci-archive:x.tar", "docker-daemon:app:v1",
		"containers-storage:app", "dir:/x", "UPPER/case", "registry.example/app:bad tag", "app@sha256:short",
		"/abs/path", "r.example/a/../b:v1", "r.example/a//b", "r.example/-a", "r.example/a_-b", "r.example/a/", "a\x00b", strings.Repeat("a", maxImageRefLen+1), "docker://",
	} {
		if r, err := ParseImageRef(in); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("ParseImageRef(%q) = %v, %v; want ErrInvalid", textclip.Bytes(in, maxEcho), r, err)
		}
	}
}

func FuzzParseImageRef(f *testing.F) {
	for _, s := range []string{"alpine", "localhost:5000/a/b:c", "oci-layout:/x", "docker-archive:y.tar",
		"docker://r/x@sha256:" + strings.Repeat("0", 64), "oci:x", "a:b:c", "oci-layout:../.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseImageRef(s)
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if r.Source() < ImageRegistry || r.Source() > ImageDockerArchive {
			t.Fatalf("source %v", r.Source())
		}
		if (r.Path() == "") != (r.Source() == ImageRegistry) || strings.IndexByte(r.String(), 0) >= 0 {
			t.Fatalf("%q: path %q for source %v", s, r.Path(), r.Source())
		}
		again, err := ParseImageRef(r.String())
		if err != nil || again.Source() != r.Source() || again.String() != r.String() || again.Path() != r.Path() {
			t.Fatalf("%q: String() %q does not parse back to the same reference: %v %v", s, r.String(), again, err)
		}
	})
}

func TestHasRegistryHost(t *testing.T) {
	for s, want := range map[string]bool{
		"ghcr.io/x/y:1":      true,
		"localhost/x":        true,
		"127.0.0.1:5000/x":   true,
		"registry:5000/x":    true,
		"library/alpine":     false,
		"alpine":             false,
		"./rootfs/x":         false,
		"../up/x":            false,
		"rootfs.d":           false,
		"":                   false,
		"docker.io/library/": true,
	} {
		if got := HasRegistryHost(s); got != want {
			t.Errorf("HasRegistryHost(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"docker://alpine": true, "oci-layout:/d": true, "docker-archive:/f.tar": true, "/abs": false, "ghcr.io/x": false} {
		if got := IsImageRefForm(s); got != want {
			t.Errorf("IsImageRefForm(%q) = %v, want %v", s, got, want)
		}
	}
}
