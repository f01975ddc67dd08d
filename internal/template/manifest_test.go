package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func sampleManifest() Manifest {
	return Manifest{
		SchemaVersion: ManifestSchemaVersion,
		Rootfs:        RootfsInfo{Digest: "sha256:" + strings.Repeat("ab", 32), SizeBytes: 42, Entries: 3},
		Config:        Config{Env: []string{"PATH=/bin", "A=<&>"}, WorkingDir: "/root"},
	}
}

func TestManifestCanonicalEncoding(t *testing.T) {
	b, err := sampleManifest().Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"config":{"env":["PATH=/bin","A=<&>"],"working_dir":"/root"},"rootfs":{"digest":"sha256:` +
		strings.Repeat("ab", 32) + `","entries":3,"size_bytes":42},"schema_version":1}`
	if string(b) != want {
		t.Fatalf("encoding\n got %s\nwant %s", b, want)
	}
	// Keys are sorted: re-encoding through a map (which encoding/json sorts)
	// gives the same bytes.
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	enc := json.NewEncoder(&again)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		t.Fatal(err)
	}
	if got := bytes.TrimSpace(again.Bytes()); !bytes.Equal(got, b) {
		t.Errorf("keys not in sorted order:\n%s\n%s", b, got)
	}
	m, err := ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Digest()
	if err != nil || d != manifestDigest(b) {
		t.Errorf("Digest = %s, %v; want %s", d, err, manifestDigest(b))
	}
	// Nil and empty env encode alike.
	m.Config.Env = nil
	b1, _ := m.Encode()
	m.Config.Env = []string{}
	b2, _ := m.Encode()
	if !bytes.Equal(b1, b2) || !strings.Contains(string(b1), `"env":[]`) {
		t.Errorf("nil env %s, empty env %s", b1, b2)
	}
}

func TestParseManifestRejects(t *testing.T) {
	good, err := sampleManifest().Encode()
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(m *Manifest)) string {
		m := sampleManifest()
		f(&m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := map[string]string{
		"whitespace":       " " + string(good),
		"trailing newline": string(good) + "\n",
		"trailing data":    string(good) + "{}",
		"reordered keys":   strings.Replace(string(good), `{"config":`, `{"schema_version":1,"config":`, 1),
		"unknown field":    strings.Replace(string(good), `{"config":`, `{"extra":1,"config":`, 1),
		"html escaped":     strings.Replace(string(good), "<&>", `\u003c\u0026\u003e`, 1),
		"schema version":   mutate(func(m *Manifest) { m.SchemaVersion = 2 }),
		"bad digest":       mutate(func(m *Manifest) { m.Rootfs.Digest = "sha256:XYZ" }),
		"upper digest":     mutate(func(m *Manifest) { m.Rootfs.Digest = "sha256:" + strings.Repeat("AB", 32) }),
		"no entries":       mutate(func(m *Manifest) { m.Rootfs.Entries = 0 }),
		"negative size":    mutate(func(m *Manifest) { m.Rootfs.SizeBytes = -1 }),
		"env without =":    mutate(func(m *Manifest) { m.Config.Env = []string{"PATH"} }),
		"env empty name":   mutate(func(m *Manifest) { m.Config.Env = []string{"=x"} }),
		"relative workdir": mutate(func(m *Manifest) { m.Config.WorkingDir = "root" }),
		"unclean workdir":  mutate(func(m *Manifest) { m.Config.WorkingDir = "/root/../etc" }),
		"not json":         "nope",
		"empty":            "",
	}
	for name, in := range cases {
		if _, err := ParseManifest([]byte(in)); !errors.Is(err, model.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	good, err := sampleManifest().Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"config":{"env":[],"working_dir":"/"},"rootfs":{"digest":"sha256:00","entries":1,"size_bytes":0},"schema_version":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		// Accepted input is canonical: it re-encodes to itself.
		b, err := m.Encode()
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("accepted non-canonical manifest %q (re-encoded %q, %v)", data, b, err)
		}
	})
}
