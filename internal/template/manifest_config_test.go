package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
	"github.com/airlockdev/airlock/internal/model"
)

// The manifest of a template without image config fields is byte for byte
// what it was before Cmd, Entrypoint and User existed.
func TestManifestWithoutImageFieldsIsUnchanged(t *testing.T) {
	m := Manifest{
		SchemaVersion: ManifestSchemaVersion,
		Config:        DefaultConfig(),
		Rootfs: RootfsInfo{
			Digest:    "sha256:bc703171cb80a2b01673a098d7e0ff2388b2616bf025d8348e538f17529d6187",
			Entries:   288,
			SizeBytes: 1982426,
		},
	}
	const golden = `{"config":{"env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"working_dir":"/"},` +
		`"rootfs":{"digest":"sha256:bc703171cb80a2b01673a098d7e0ff2388b2616bf025d8348e538f17529d6187","entries":288,"size_bytes":1982426},"schema_version":1}`
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != golden {
		t.Fatalf("encoding changed:\n got %s\nwant %s", b, golden)
	}
	d, err := m.Digest()
	if err != nil || d != "sha256:93169b62828e8752a010fbbce3d6e67f8c38cd180ef98448d8138a12d50dd7de" {
		t.Fatalf("digest = %s, %v", d, err)
	}
}

// The default template built from the busybox these digests were recorded
// with keeps its digest (tree digest and manifest) across this change.
func TestDefaultTemplateDigestIsUnchanged(t *testing.T) {
	bb := airtest.BusyboxPath(t)
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	const recordedBusybox = "3d9f2889d6782537624a4e1a10e68a2ddd53e0ee8bac02676f27308f42ec6bf6"
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != recordedBusybox {
		t.Skipf("%s is not the busybox the digest was recorded with", bb)
	}
	s, _ := newStore(t)
	imp, err := s.EnsureDefault(context.Background(), bb)
	if err != nil {
		t.Fatal(err)
	}
	if want := model.TemplateDigest("sha256:93169b62828e8752a010fbbce3d6e67f8c38cd180ef98448d8138a12d50dd7de"); imp.Digest != want {
		t.Errorf("default template digest = %s, want %s (manifest %s)", imp.Digest, want, imp.Manifest)
	}
}

func TestManifestImageFields(t *testing.T) {
	m := Manifest{
		SchemaVersion: ManifestSchemaVersion,
		Config: Config{
			Cmd: []string{"-c", "x"}, Entrypoint: []string{"/bin/sh"}, Env: []string{"A=b"},
			User: "1000:1000", WorkingDir: "/w",
		},
		Rootfs: RootfsInfo{Digest: "sha256:" + strings.Repeat("0", 64), Entries: 1},
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"config":{"cmd":["-c","x"],"entrypoint":["/bin/sh"],"env":["A=b"],"user":"1000:1000","working_dir":"/w"},`
	if !strings.HasPrefix(string(b), want) {
		t.Fatalf("encoding %s, want it to start with %s", b, want)
	}
	back, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Config.User != "1000:1000" || len(back.Config.Cmd) != 2 || len(back.Config.Entrypoint) != 1 {
		t.Errorf("parsed back %+v", back.Config)
	}
	// Empty lists and strings are omitted; spelling them out is not canonical.
	for _, field := range []string{`"cmd":[],`, `"entrypoint":[],`} {
		bad := strings.Replace(string(b), `"cmd":["-c","x"],"entrypoint":["/bin/sh"],`, field, 1)
		if _, err := ParseManifest([]byte(bad)); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid (not canonical)", bad, err)
		}
	}
}
