package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestImportSource(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	// A local directory whose name looks like a registry host stays a path.
	if err := os.MkdirAll(filepath.Join(dir, "build.out", "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{
		"/srv/rootfs":                   "/srv/rootfs",
		"rootfs":                        filepath.Join(dir, "rootfs"),
		"./rootfs.tar":                  filepath.Join(dir, "rootfs.tar"),
		"../x/y":                        filepath.Join(filepath.Dir(dir), "x", "y"),
		"build.out/rootfs":              filepath.Join(dir, "build.out", "rootfs"),
		"alpine":                        filepath.Join(dir, "alpine"), // a Docker Hub name needs docker://
		"ghcr.io/example/python:3.12":   "ghcr.io/example/python:3.12",
		"127.0.0.1:5000/img@sha256:abc": "127.0.0.1:5000/img@sha256:abc",
		"localhost/img:v1":              "localhost/img:v1",
		"docker://alpine:3.20":          "docker://alpine:3.20",
		"oci-layout:/srv/images/python": "oci-layout:/srv/images/python",
		"oci-layout:relative":           "oci-layout:relative", // the server refuses it
		"docker-archive:/srv/img.tar":   "docker-archive:/srv/img.tar",
	} {
		got, err := importSource(arg)
		if err != nil || got != want {
			t.Errorf("importSource(%q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	if _, err := importSource(""); err == nil {
		t.Error("empty source accepted")
	}
}
