package cli

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestParseCpEnd(t *testing.T) {
	t.Parallel()
	sb := "sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	cases := []struct {
		in      string
		sandbox bool
		bad     bool
	}{
		{sb + ":/work/a", true, false},
		{sb + ":/", true, false},
		{sb + ":work", false, true},
		{sb + ":/a/../b", false, true},
		{"./local:file", false, false},
		{"C:/x", false, false},
		{"-", false, false},
		{"", false, true},
	}
	for _, tc := range cases {
		e, err := parseCpEnd(tc.in)
		if (err != nil) != tc.bad || (err == nil && (e.sandbox != "") != tc.sandbox) {
			t.Errorf("parseCpEnd(%q) = %+v, %v", tc.in, e, err)
		}
	}
}

// TestExtractLocalTarRefusesEscapes: a tar from a sandbox is untrusted.
func TestExtractLocalTarRefusesEscapes(t *testing.T) {
	t.Parallel()
	entry := func(hs ...*tar.Header) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			_ = tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write(make([]byte, h.Size))
			}
		}
		tw.Close()
		return &b
	}
	reg := func(name string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}
	}
	cases := map[string]*bytes.Buffer{
		"dot-dot":        entry(reg("../pwned")),
		"absolute":       entry(reg("/pwned")),
		"through link":   entry(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: ".."}, reg("l/pwned")),
		"through abs":    entry(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, reg("l/pwned")),
		"device":         entry(&tar.Header{Name: "d", Typeflag: tar.TypeChar}),
		"nested dot-dot": entry(reg("a/../../pwned")),
	}
	for name, b := range cases {
		base := t.TempDir()
		if err := extractLocalTar(b, filepath.Join(base, "out")); err == nil {
			t.Errorf("%s: extracted", name)
		}
		if _, err := os.Stat(filepath.Join(base, "pwned")); err == nil {
			t.Errorf("%s: wrote outside the target", name)
		}
	}
	// A normal tree round-trips.
	src := t.TempDir()
	_ = os.MkdirAll(filepath.Join(src, "d/e"), 0o755)
	_ = os.WriteFile(filepath.Join(src, "d/e/f"), []byte("x"), 0o600)
	_ = os.Symlink("d/e/f", filepath.Join(src, "l"))
	var b bytes.Buffer
	if err := writeLocalTar(&b, src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst")
	if err := extractLocalTar(&b, dst); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "l")); err != nil || string(data) != "x" {
		t.Fatalf("round trip: %q, %v", data, err)
	}
}
