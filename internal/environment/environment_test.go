package environment

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

// schemaFields records, per schema version, every field of Definition as
// its JSON path. A field added, removed or renamed without a new
// SchemaVersion (and a new entry here) fails TestSchemaFieldsPinned.
var schemaFields = map[int][]string{
	1: {
		"schema_version",
		"name",
		"host.os", "host.arch",
		"runtime.name", "runtime.version", "runtime.binary_digest",
		"guest.os", "guest.arch",
		"boot.kernel_digest", "boot.initramfs_digest", "boot.command_line",
		"isolation",
		"snapshot.capability", "snapshot.format",
		"oom_scope",
	},
}

func jsonFields(t *testing.T, typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" || tag == "-" {
			t.Fatalf("field %s%s has no JSON name", prefix, f.Name)
		}
		if f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(t, f.Type, prefix+tag+".")...)
			continue
		}
		if k := f.Type.Kind(); k != reflect.String && k != reflect.Int {
			t.Fatalf("field %s%s is a %s: the canonical encoding is pinned for strings and ints only", prefix, tag, k)
		}
		out = append(out, prefix+tag)
	}
	return out
}

func TestSchemaFieldsPinned(t *testing.T) {
	want, ok := schemaFields[SchemaVersion]
	if !ok {
		t.Fatalf("SchemaVersion %d has no recorded field list: add it to schemaFields", SchemaVersion)
	}
	got := jsonFields(t, reflect.TypeOf(Definition{}), "")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Definition's fields changed without a new SchemaVersion:\n got %q\nwant %q\nbump SchemaVersion and record the new list", got, want)
	}
}

func golden() Definition {
	return Definition{
		SchemaVersion: 1,
		Name:          NameRunsc,
		Host:          Platform{OS: "linux", Arch: "amd64"},
		Runtime: RuntimeBinding{
			Name:         "runsc",
			Version:      "runsc version release-20240807.0\nspec: 1.1.0-rc.1",
			BinaryDigest: Digest("sha256:" + strings.Repeat("ab", 32)),
		},
		Guest:     Platform{OS: "linux", Arch: "amd64"},
		Isolation: IsolationUserSpaceKernel,
		Snapshot:  Snapshot{Capability: SnapshotMemory, Format: "runsc-checkpoint/1"},
		OOMScope:  OOMKillsSandbox,
	}
}

// The canonical encoding and reference of a fixed definition are pinned:
// changing either changes every stored reference.
func TestGolden(t *testing.T) {
	const wantJSON = `{"boot":{},"guest":{"arch":"amd64","os":"linux"},"host":{"arch":"amd64","os":"linux"},"isolation":"user-space-kernel","name":"runsc","oom_scope":"sandbox","runtime":{"binary_digest":"sha256:abababababababababababababababababababababababababababababababab","name":"runsc","version":"runsc version release-20240807.0\nspec: 1.1.0-rc.1"},"schema_version":1,"snapshot":{"capability":"memory","format":"runsc-checkpoint/1"}}`
	const wantRef = "env:sha256:c5bd7f44f644cd30cb9d8c097fdcd19826899b408178c8c402bf25778c0ed837"
	c, err := golden().Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if string(c) != wantJSON {
		t.Fatalf("canonical encoding:\n got %s\nwant %s", c, wantJSON)
	}
	ref, err := golden().Ref()
	if err != nil {
		t.Fatal(err)
	}
	if string(ref) != wantRef {
		t.Fatalf("reference = %s, want %s", ref, wantRef)
	}
	if _, err := model.ParseEnvironmentRef(string(ref)); err != nil {
		t.Fatal(err)
	}
	// Parse of the canonical encoding gives the definition back.
	back, err := Parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if back != golden() {
		t.Fatalf("Parse(Canonical) = %+v, want %+v", back, golden())
	}
}

// More pinned encodings, between them every isolation class, OOM scope and
// snapshot capability a definition may hold, boot inputs, a guest platform
// other than the host's and a command line with characters that HTML
// escaping would change. The values are strings in the encoding: moving
// their types between packages must leave these bytes alone.
func TestGoldenEveryValue(t *testing.T) {
	dg := func(b string) Digest { return Digest("sha256:" + strings.Repeat(b, 32)) }
	for _, tc := range []struct {
		name     string
		def      Definition
		wantJSON string
		wantRef  string
	}{{
		name: "qemu hardware-vm",
		def: Definition{
			SchemaVersion: 1, Name: NameQEMU,
			Host:      Platform{OS: "linux", Arch: "amd64"},
			Runtime:   RuntimeBinding{Name: "qemu", Version: "QEMU emulator version 8.2.2", BinaryDigest: dg("cd")},
			Guest:     Platform{OS: "linux", Arch: "amd64"},
			Boot:      Boot{KernelDigest: dg("01"), InitramfsDigest: dg("02"), CommandLine: "console=ttyS0 <quiet> & panic=-1"},
			Isolation: IsolationHardwareVM,
			Snapshot:  Snapshot{Capability: SnapshotFilesystem, Format: "qemu-disk/1"},
			OOMScope:  OOMKillsProcess,
		},
		wantJSON: `{"boot":{"command_line":"console=ttyS0 <quiet> & panic=-1","initramfs_digest":"sha256:0202020202020202020202020202020202020202020202020202020202020202","kernel_digest":"sha256:0101010101010101010101010101010101010101010101010101010101010101"},"guest":{"arch":"amd64","os":"linux"},"host":{"arch":"amd64","os":"linux"},"isolation":"hardware-vm","name":"qemu","oom_scope":"process","runtime":{"binary_digest":"sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","name":"qemu","version":"QEMU emulator version 8.2.2"},"schema_version":1,"snapshot":{"capability":"filesystem","format":"qemu-disk/1"}}`,
		wantRef:  "env:sha256:c418209fb281e9c66301a6fa1b135e37a74eddab46a0f3c5fbfd20c6946d9a51",
	}, {
		name: "qemu emulated-vm on another host",
		def: Definition{
			SchemaVersion: 1, Name: NameQEMU,
			Host:      Platform{OS: "linux", Arch: "arm64"},
			Runtime:   RuntimeBinding{Name: "qemu", Version: "QEMU emulator version 8.2.2", BinaryDigest: dg("cd")},
			Guest:     Platform{OS: "linux", Arch: "amd64"},
			Boot:      Boot{KernelDigest: dg("01")},
			Isolation: IsolationEmulatedVM,
			Snapshot:  Snapshot{Capability: SnapshotNone},
			OOMScope:  OOMKillsProcess,
		},
		wantJSON: `{"boot":{"kernel_digest":"sha256:0101010101010101010101010101010101010101010101010101010101010101"},"guest":{"arch":"amd64","os":"linux"},"host":{"arch":"arm64","os":"linux"},"isolation":"emulated-vm","name":"qemu","oom_scope":"process","runtime":{"binary_digest":"sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","name":"qemu","version":"QEMU emulator version 8.2.2"},"schema_version":1,"snapshot":{"capability":"none"}}`,
		wantRef:  "env:sha256:09ce8dc2f1007be7a6393bc99a930cd23a0786060f18e39a2991b880a9f57d7c",
	}, {
		name: "runc shared-kernel",
		def: Definition{
			SchemaVersion: 1, Name: NameRunc,
			Host:      Platform{OS: "linux", Arch: "amd64"},
			Runtime:   RuntimeBinding{Name: "runc", Version: "runc version 1.1.12", BinaryDigest: dg("ef")},
			Guest:     Platform{OS: "linux", Arch: "amd64"},
			Isolation: IsolationSharedKernel,
			Snapshot:  Snapshot{Capability: SnapshotFilesystem, Format: "oci-upper/1"},
			OOMScope:  OOMKillsProcess,
		},
		wantJSON: `{"boot":{},"guest":{"arch":"amd64","os":"linux"},"host":{"arch":"amd64","os":"linux"},"isolation":"shared-kernel","name":"runc","oom_scope":"process","runtime":{"binary_digest":"sha256:efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef","name":"runc","version":"runc version 1.1.12"},"schema_version":1,"snapshot":{"capability":"filesystem","format":"oci-upper/1"}}`,
		wantRef:  "env:sha256:273f4f27e55ea0fc2cdfe70a4050178f09d2dfe5adda78bd4e5361e1a8cc939d",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.def.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			if string(c) != tc.wantJSON {
				t.Fatalf("canonical encoding:\n got %s\nwant %s", c, tc.wantJSON)
			}
			ref, err := tc.def.Ref()
			if err != nil {
				t.Fatal(err)
			}
			if string(ref) != tc.wantRef {
				t.Fatalf("reference = %s, want %s", ref, tc.wantRef)
			}
			back, err := Parse(c)
			if err != nil {
				t.Fatal(err)
			}
			if back != tc.def {
				t.Fatalf("Parse(Canonical) = %+v, want %+v", back, tc.def)
			}
		})
	}
}

func TestRefChangesWithEveryField(t *testing.T) {
	base, err := golden().Ref()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(d *Definition)
	}{
		{"name", func(d *Definition) { d.Name = NameCrun }},
		{"host arch", func(d *Definition) { d.Host.Arch = "arm64" }},
		{"runtime version", func(d *Definition) { d.Runtime.Version = "other" }},
		{"binary digest", func(d *Definition) { d.Runtime.BinaryDigest = Digest("sha256:" + strings.Repeat("cd", 32)) }},
		{"guest os", func(d *Definition) { d.Guest.OS = "freebsd" }},
		{"kernel", func(d *Definition) { d.Boot.KernelDigest = Digest("sha256:" + strings.Repeat("01", 32)) }},
		{"command line", func(d *Definition) { d.Boot.CommandLine = "console=ttyS0" }},
		{"isolation", func(d *Definition) { d.Isolation = IsolationSharedKernel }},
		{"snapshot", func(d *Definition) { d.Snapshot = Snapshot{Capability: SnapshotFilesystem} }},
		{"snapshot format", func(d *Definition) { d.Snapshot.Format = "runsc-checkpoint/2" }},
		{"oom", func(d *Definition) { d.OOMScope = OOMKillsProcess }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := golden()
			tc.edit(&d)
			ref, err := d.Ref()
			if err != nil {
				t.Fatal(err)
			}
			if ref == base {
				t.Fatalf("changing %s kept the reference %s", tc.name, ref)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	c, err := golden().Canonical()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"not json", `{`, "environment definition"},
		{"no version", `{"name":"runsc"}`, "no schema_version"},
		{"newer version", strings.Replace(string(c), `"schema_version":1`, `"schema_version":2`, 1), "schema version 2"},
		{"unknown field", strings.Replace(string(c), `"boot":{}`, `"boot":{},"extra":1`, 1), "unknown field"},
		{"trailing", string(c) + ` {}`, "after top-level value"},
		{"unknown name", strings.Replace(string(c), `"name":"runsc"`, `"name":"lxc"`, 1), "unknown execution environment"},
		{"bad digest", strings.Replace(string(c), `sha256:abab`, `sha256:ABAB`, 1), "digest"},
		{"bad isolation", strings.Replace(string(c), `user-space-kernel`, `none`, 1), "isolation"},
		{"bad snapshot", strings.Replace(string(c), `"capability":"memory"`, `"capability":"disk"`, 1), "snapshot capability"},
		{"format without capability", strings.Replace(string(c), `"capability":"memory"`, `"capability":"none"`, 1), "without a snapshot capability"},
		{"bad oom", strings.Replace(string(c), `"oom_scope":"sandbox"`, `"oom_scope":"host"`, 1), "oom scope"},
		{"bad platform", strings.Replace(string(c), `"os":"linux"`, `"os":"Linux"`, 1), "platform"},
		{"too big", `{"schema_version":1,"x":"` + strings.Repeat("a", maxDefinitionBytes) + `"}`, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("Parse = %v, want model.ErrInvalid", err)
			}
		})
	}
}

func TestParseSelector(t *testing.T) {
	ref := "env:sha256:" + strings.Repeat("0f", 32)
	for _, tc := range []struct {
		in      string
		want    Selector
		wantErr bool
	}{
		{in: "runsc", want: Selector{Name: NameRunsc}},
		{in: "runc", want: Selector{Name: NameRunc}},
		{in: "crun", want: Selector{Name: NameCrun}},
		{in: ref, want: Selector{Ref: model.EnvironmentRef(ref)}},
		{in: "", wantErr: true},
		{in: "RUNSC", wantErr: true},
		{in: "env:sha256:12", wantErr: true},
		{in: "firecracker", wantErr: true},
	} {
		got, err := ParseSelector(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseSelector(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("ParseSelector(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestSnapshotCapabilityOf(t *testing.T) {
	for kind, want := range map[model.SnapshotKind]SnapshotCapability{
		model.SnapshotMemory:     SnapshotMemory,
		model.SnapshotFilesystem: SnapshotFilesystem,
		"":                       SnapshotNone,
	} {
		if got := SnapshotCapabilityOf(kind); got != want {
			t.Errorf("SnapshotCapabilityOf(%q) = %q, want %q", kind, got, want)
		}
	}
}

func TestVerify(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rt")
	if err := os.WriteFile(bin, []byte("binary one"), 0o755); err != nil {
		t.Fatal(err)
	}
	dg, err := DigestFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if want := DigestOf(sha256.Sum256([]byte("binary one"))); dg != want {
		t.Fatalf("DigestFile = %s, want %s", dg, want)
	}
	d := golden()
	d.Runtime.BinaryDigest = dg
	if err := Verify(d, bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("binary two"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Verify(d, bin); !errors.Is(err, ErrArtifactsMissing) {
		t.Fatalf("Verify after the binary changed = %v, want ErrArtifactsMissing", err)
	}
	if err := Verify(d, filepath.Join(t.TempDir(), "gone")); !errors.Is(err, ErrArtifactsMissing) {
		t.Fatalf("Verify of a missing binary = %v, want ErrArtifactsMissing", err)
	}
}

func FuzzParse(f *testing.F) {
	c, err := golden().Canonical()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c)
	f.Add([]byte(`{"schema_version":1}`))
	f.Add([]byte(`{"schema_version":1,"name":"runc","host":{"os":"linux","arch":"amd64"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			return
		}
		c1, err := d.Canonical()
		if err != nil {
			t.Fatalf("a parsed definition does not encode: %v", err)
		}
		d2, err := Parse(c1)
		if err != nil {
			t.Fatalf("the canonical encoding does not parse: %v\n%s", err, c1)
		}
		c2, err := d2.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if d2 != d || !bytes.Equal(c1, c2) {
			t.Fatalf("round trip changed the definition:\n%s\n%s", c1, c2)
		}
	})
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"runsc", "runc", "env:sha256:" + strings.Repeat("a", 64), "env:", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			return
		}
		if (sel.Name == "") == (sel.Ref == "") {
			t.Fatalf("ParseSelector(%q) = %+v: exactly one of name and ref must be set", s, sel)
		}
		if sel.String() != s {
			t.Fatalf("ParseSelector(%q).String() = %q", s, sel.String())
		}
	})
}
