package template

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockdev/airlock/internal/model"
)

// sampleWithXattrs is the sample tree plus kept and dropped extended
// attributes.
func sampleWithXattrs(t *testing.T) string {
	t.Helper()
	dir := makeSample(t)
	for _, x := range []struct {
		rel, name string
		val       []byte
	}{
		{"bin/tool", "security.capability", capSet(13)},
		{"bin/tool", "user.note", []byte("bin\x00ary\xff")},
		{"etc", "user.dir", []byte("d")},
		{"etc/empty", "trusted.overlay.opaque", []byte("y")},
	} {
		if err := unix.Lsetxattr(filepath.Join(dir, x.rel), x.name, x.val, 0); err != nil {
			t.Skipf("xattrs not supported here: %v", err)
		}
	}
	return dir
}

func TestImportDirKeepsXattrsAndTarRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	src := sampleWithXattrs(t)
	plain, err := Open(filepath.Join(t.TempDir(), "plain"), nil)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := s.ImportDir(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := unix.Lgetxattr(filepath.Join(s.RootfsDir(imp.Digest), "bin/tool"), "user.note", make([]byte, 64))
	if err != nil || got != len("bin\x00ary\xff") {
		t.Fatalf("user.note not kept: %d %v", got, err)
	}
	var a, b bytes.Buffer
	if err := s.WriteTar(ctx, imp.Digest, &a); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteTar(ctx, imp.Digest, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("WriteTar is not deterministic")
	}
	back, err := plain.ImportTar(ctx, bytes.NewReader(a.Bytes()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Digest != imp.Digest {
		t.Fatalf("tar round trip: %s, want %s", back.Digest, imp.Digest)
	}
	if err := plain.Verify(ctx, back.Digest); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.User = "1000"
	withCfg, err := plain.ImportTarConfig(ctx, bytes.NewReader(a.Bytes()), cfg, nil)
	if err != nil || withCfg.Digest == imp.Digest {
		t.Fatalf("ImportTarConfig = %s, %v", withCfg.Digest, err)
	}
	if err := s.WriteTar(ctx, model.TemplateDigest("sha256:"+string(bytes.Repeat([]byte("0"), 64))), &a); !errors.Is(err, ErrNotFound) {
		t.Fatalf("WriteTar of a missing template = %v", err)
	}
}

func TestStagedAdopt(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	src := sampleWithXattrs(t)
	want, err := s.ImportDir(ctx, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(filepath.Join(t.TempDir(), "other"), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := other.NewStaged()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Remove()
	if out, err := exec.Command("cp", "-a", src+"/.", st.Rootfs()).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.Chmod(st.Rootfs(), 0o755); err != nil {
		t.Fatal(err)
	}
	imp, err := st.Adopt(ctx, DefaultConfig(), "test tree")
	if err != nil {
		t.Fatal(err)
	}
	if imp.Digest != want.Digest || imp.Reused {
		t.Fatalf("adopted %s (reused %v), ImportDir gave %s", imp.Digest, imp.Reused, want.Digest)
	}
	if _, err := os.Stat(st.Rootfs()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rootfs still staged: %v", err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(other.RootfsDir(imp.Digest), "etc/empty"), "trusted.overlay.opaque", nil); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("trusted.overlay.opaque kept: %v", err)
	}
	if err := other.Verify(ctx, imp.Digest); err != nil {
		t.Fatal(err)
	}

	bad, err := other.NewStaged()
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Remove()
	if err := unix.Mkfifo(filepath.Join(bad.Rootfs(), "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Adopt(ctx, DefaultConfig(), "bad tree"); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("adopting a fifo = %v", err)
	}
	if err := other.SetLimits(Limits{MaxBytes: 1, MaxEntries: 100, MaxPathLen: 100}); err != nil {
		t.Fatal(err)
	}
	big, err := other.NewStaged()
	if err != nil {
		t.Fatal(err)
	}
	defer big.Remove()
	if err := os.WriteFile(filepath.Join(big.Rootfs(), "f"), []byte("12"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := big.Adopt(ctx, DefaultConfig(), "big tree"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("adopting too much = %v", err)
	}
}
