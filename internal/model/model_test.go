package model

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
)

func TestIDs(t *testing.T) {
	parsers := []struct {
		prefix string
		fresh  func() string
		parse  func(string) (string, error)
	}{
		{"sbx", func() string { return NewSandboxID().String() }, func(s string) (string, error) { v, err := ParseSandboxID(s); return string(v), err }},
		{"op", func() string { return NewOperationID().String() }, func(s string) (string, error) { v, err := ParseOperationID(s); return string(v), err }},
		{"cs", func() string { return NewCommandSessionID().String() }, func(s string) (string, error) { v, err := ParseCommandSessionID(s); return string(v), err }},
		{"proc", func() string { return NewProcessID().String() }, func(s string) (string, error) { v, err := ParseProcessID(s); return string(v), err }},
		{"prj", func() string { return NewProjectID().String() }, func(s string) (string, error) { v, err := ParseProjectID(s); return string(v), err }},
		{"key", func() string { return NewAPIKeyID().String() }, func(s string) (string, error) { v, err := ParseAPIKeyID(s); return string(v), err }},
		{"node", func() string { return NewNodeID().String() }, func(s string) (string, error) { v, err := ParseNodeID(s); return string(v), err }},
		{"pool", func() string { return NewPoolID().String() }, func(s string) (string, error) { v, err := ParsePoolID(s); return string(v), err }},
	}
	for _, p := range parsers {
		t.Run(p.prefix, func(t *testing.T) {
			id := p.fresh()
			if !strings.HasPrefix(id, p.prefix+"_") || len(id) != len(p.prefix)+1+idRandomLen {
				t.Fatalf("fresh ID %q has the wrong shape", id)
			}
			if got, err := p.parse(id); err != nil || got != id {
				t.Fatalf("parse(%q) = %q, %v", id, got, err)
			}
			if p.fresh() == id {
				t.Fatal("two fresh IDs are equal")
			}
			rest := id[len(p.prefix)+1:]
			bad := []string{
				"", p.prefix, p.prefix + "_", rest,
				"x" + id, id + "a", id[:len(id)-1],
				p.prefix + "_" + strings.ToUpper(rest),
				p.prefix + "_" + rest[:25] + "1", // '1' is not base32
				p.prefix + "_" + rest[:25] + "/",
				p.prefix + "-" + rest,
				"../" + id,
			}
			for _, b := range bad {
				if _, err := p.parse(b); !errors.Is(err, ErrInvalid) {
					t.Errorf("parse(%q) err = %v, want ErrInvalid", b, err)
				}
			}
		})
	}
	// A valid ID of one kind is never valid as another.
	if _, err := ParseSandboxID(NewOperationID().String()); err == nil {
		t.Error("an operation ID parsed as a sandbox ID")
	}
}

func TestTemplateRef(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	cases := []struct {
		in       string
		ok       bool
		isDigest bool
	}{
		{digest, true, true},
		{"default", true, false},
		{"python-3.12", true, false},
		{"a", true, false},
		{"0abc", true, false},
		{strings.Repeat("a", 63), true, false},
		{strings.Repeat("a", 64), false, false},
		{"", false, false},
		{"-x", false, false},
		{".x", false, false},
		{"Default", false, false},
		{"a/b", false, false},
		{"a b", false, false},
		{"sha256:" + strings.Repeat("AB", 32), false, false},
		{"sha256:" + strings.Repeat("a", 63), false, false},
		{"sha256:" + strings.Repeat("g", 64), false, false},
		{"sha512:" + strings.Repeat("a", 64), false, false},
		{"python:3.12", true, false},
		{"python:Latest_1.x-y", true, false},
		{"python:", false, false},
		{"python:-x", false, false},
		{"python:a:b", false, false},
		{":latest", false, false},
		{"python:" + strings.Repeat("a", 129), false, false},
	}
	for _, tc := range cases {
		ref, err := ParseTemplateRef(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseTemplateRef(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseTemplateRef(%q) err %v does not wrap ErrInvalid", tc.in, err)
			}
			continue
		}
		_, isDigest := ref.Digest()
		_, isName := ref.Name()
		want := tc.in
		if !tc.isDigest && !strings.Contains(want, ":") {
			want += ":latest"
		}
		if isDigest != tc.isDigest || isName == tc.isDigest || ref.String() != want {
			t.Errorf("ParseTemplateRef(%q) = %+v", tc.in, ref)
		}
	}
}

func TestGuestPath(t *testing.T) {
	for _, ok := range []string{"/", "/tmp", "/home/user/a b", "/ünïcode", "/" + strings.Repeat("a", 255), "/...", "/a/..b"} {
		if _, err := ParseGuestPath(ok); err != nil {
			t.Errorf("ParseGuestPath(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "tmp", "./tmp", "/tmp/", "/tmp/../etc", "/a//b", "/a/./b", "/a\x00b", "/\xff", "/" + strings.Repeat("a", 4096), "/" + strings.Repeat("a", 256), "/x/" + strings.Repeat("a", 256) + "/y", "/..", "/a/.."} {
		if _, err := ParseGuestPath(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseGuestPath(%q) err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestEnvAndMetadata(t *testing.T) {
	env, err := ParseEnv(map[string]string{"PATH": "/bin", "_x1": "", "A": "b=c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(env.List(), ","); got != "A=b=c,PATH=/bin,_x1=" {
		t.Errorf("List() = %s", got)
	}
	if m := env.Merge(Env{"A": "z"}); m["A"] != "z" || env["A"] != "b=c" {
		t.Error("Merge must override without mutating")
	}
	for _, bad := range []map[string]string{{"1A": "x"}, {"A-B": "x"}, {"": "x"}, {"A=B": "x"}, {"A": "x\x00"}, {"A": "\xff"}} {
		if _, err := ParseEnv(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEnv(%q) err = %v", bad, err)
		}
	}
	if _, err := ParseMetadata(map[string]string{"team": "search", "app.kubernetes.io/name": "x"}); err != nil {
		t.Errorf("ParseMetadata: %v", err)
	}
	many := map[string]string{}
	for i := 0; i < 33; i++ {
		many[strings.Repeat("k", i+1)] = "v"
	}
	for _, bad := range []map[string]string{{"a b": "x"}, {"": "x"}, {strings.Repeat("k", 64): "x"}, {"k": strings.Repeat("v", 257)}, many} {
		if _, err := ParseMetadata(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseMetadata(%d entries) err = %v", len(bad), err)
		}
	}
	if k, v, err := ParseMetadataFilter("team=a=b"); err != nil || k != "team" || v != "a=b" {
		t.Errorf("ParseMetadataFilter = %q %q %v", k, v, err)
	}
	if _, _, err := ParseMetadataFilter("noequals"); err == nil {
		t.Error("ParseMetadataFilter accepted a term without '='")
	}
}

func TestIdempotencyKey(t *testing.T) {
	if _, err := ParseIdempotencyKey("3f0c-uuid:like/value"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "has space", "tab\t", strings.Repeat("k", 256), "ünï"} {
		if _, err := ParseIdempotencyKey(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseIdempotencyKey(%q) err = %v", bad, err)
		}
	}
}

func TestStateMachine(t *testing.T) {
	allowed := map[[2]SandboxState]bool{}
	for from, tos := range transitions {
		for _, to := range tos {
			allowed[[2]SandboxState{from, to}] = true
		}
	}
	// Every state appears in the table, and deleting is reachable from every
	// state but deleting and deleted.
	for _, s := range AllSandboxStates() {
		if _, ok := transitions[s]; !ok {
			t.Errorf("state %s is missing from the table", s)
		}
		wantDelete := s != StateDeleting && s != StateDeleted
		if CanTransition(s, StateDeleting) != wantDelete {
			t.Errorf("%s → deleting allowed = %v", s, !wantDelete)
		}
	}
	for _, from := range AllSandboxStates() {
		for _, to := range AllSandboxStates() {
			err := CheckTransition(from, to)
			if allowed[[2]SandboxState{from, to}] {
				if err != nil {
					t.Errorf("%s → %s: %v", from, to, err)
				}
			} else if !errors.Is(err, ErrInvalidTransition) {
				t.Errorf("%s → %s err = %v, want ErrInvalidTransition", from, to, err)
			}
		}
	}
	for _, path := range [][]SandboxState{
		{StatePending, StateCreating, StateRunning, StatePausing, StatePaused, StateResuming, StateRunning, StateSuspending, StateSuspended, StateWaking, StateRunning, StateDeleting, StateDeleted},
		{StateRunning, StatePausing, StatePaused, StateSuspending, StateSuspended},
		{StatePending, StateCreating, StateFailed, StateDeleting, StateDeleted},
	} {
		for i := 1; i < len(path); i++ {
			if !CanTransition(path[i-1], path[i]) {
				t.Errorf("lifecycle path broken at %s → %s", path[i-1], path[i])
			}
		}
	}
	if !StateDeleted.Terminal() || StateFailed.Terminal() {
		t.Error("only deleted is terminal")
	}
	if _, err := ParseSandboxState("exploded"); !errors.Is(err, ErrInvalid) {
		t.Error("ParseSandboxState accepted an unknown state")
	}
}

func TestResources(t *testing.T) {
	if err := DefaultResources().Validate(); err != nil {
		t.Fatal(err)
	}
	ok := DefaultResources()
	if ok.DiskMiB != DefaultDiskMiB {
		t.Fatalf("default disk_mib %d, want %d", ok.DiskMiB, DefaultDiskMiB)
	}
	for _, bad := range []Resources{
		{CPUs: 0, MemoryMiB: 512, DiskMiB: ok.DiskMiB}, {CPUs: 65, MemoryMiB: 512, DiskMiB: ok.DiskMiB},
		{CPUs: 1, MemoryMiB: 31, DiskMiB: ok.DiskMiB}, {CPUs: 1, MemoryMiB: MaxMemoryMiB + 1, DiskMiB: ok.DiskMiB},
		{CPUs: 1, MemoryMiB: 512, DiskMiB: MinDiskMiB - 1}, {CPUs: 1, MemoryMiB: 512, DiskMiB: MaxDiskMiB + 1},
		{CPUs: 1, MemoryMiB: 512}, // no disk_mib at all
	} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	c := NodeCapacity{CPUs: 4, MemoryMiB: 4096, DiskMiB: 20480}
	if err := ok.FitsNode(c); err != nil {
		t.Fatal(err)
	}
	big := ok
	big.DiskMiB = 20481
	if err := big.FitsNode(c); !errors.Is(err, ErrExceedsCapacity) || !strings.Contains(err.Error(), "disk_mib 20481") {
		t.Fatalf("disk above the server's maximum: %v", err)
	}
	if err := big.FitsNode(NodeCapacity{}); err != nil {
		t.Fatalf("a zero capacity bounds nothing: %v", err)
	}
}

// Fuzz: parsers never panic, and whatever they accept round-trips and is
// accepted again.
func FuzzParseSandboxID(f *testing.F) {
	f.Add(NewSandboxID().String())
	f.Add("sbx_")
	f.Add("sbx_aaaaaaaaaaaaaaaaaaaaaaaaa1")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSandboxID(s)
		if err != nil {
			return
		}
		if id.String() != s || len(s) != 4+idRandomLen {
			t.Fatalf("accepted %q as %q", s, id)
		}
	})
}

func FuzzParseTemplateRef(f *testing.F) {
	f.Add("default")
	f.Add("sha256:" + strings.Repeat("0", 64))
	f.Add("sha256:")
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseTemplateRef(s)
		if err != nil {
			return
		}
		again, err := ParseTemplateRef(ref.String())
		if err != nil || again != ref {
			t.Fatalf("%q does not round-trip: %+v %v", s, again, err)
		}
	})
}

func FuzzParseGuestPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "a", "/a/../b", "//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseGuestPath(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(string(p), "/") || strings.Contains(string(p), "/../") || strings.HasSuffix(string(p), "/..") || strings.ContainsRune(string(p), 0) {
			t.Fatalf("accepted unsafe path %q", p)
		}
		if len(p) > 4096 || path.Clean(string(p)) != string(p) {
			t.Fatalf("accepted over-long or unclean path %q", p)
		}
		for c := range strings.SplitSeq(string(p)[1:], "/") {
			if len(c) > 255 || c == ".." || c == "." {
				t.Fatalf("accepted bad component %q in %q", c, p)
			}
		}
	})
}

func FuzzParseEnv(f *testing.F) {
	f.Add("PATH", "/bin")
	f.Add("1X", "")
	f.Fuzz(func(t *testing.T, k, v string) {
		env, err := ParseEnv(map[string]string{k: v})
		if err != nil {
			return
		}
		for _, kv := range env.List() {
			name, _, _ := strings.Cut(kv, "=")
			if name != k || strings.ContainsRune(kv, 0) {
				t.Fatalf("accepted %q=%q as %q", k, v, kv)
			}
		}
	})
}

func FuzzParseMetadataFilter(f *testing.F) {
	f.Add("team=search")
	f.Add("=")
	f.Fuzz(func(t *testing.T, s string) {
		k, v, err := ParseMetadataFilter(s)
		if err != nil {
			return
		}
		if k+"="+v != s {
			t.Fatalf("%q parsed as %q=%q", s, k, v)
		}
	})
}

func TestSetEnv(t *testing.T) {
	for _, tt := range []struct {
		env, set, want []string
	}{
		{nil, nil, []string{}},
		{[]string{"A=1", "B=2"}, []string{"B=3", "C=4"}, []string{"A=1", "B=3", "C=4"}},
		{[]string{"A=1", "B=2", "A=5"}, nil, []string{"A=5", "B=2"}},
		{[]string{"A=1"}, []string{"C=1", "A=", "C=2"}, []string{"A=", "C=2"}},
	} {
		if got := SetEnv(tt.env, tt.set); !slices.Equal(got, tt.want) {
			t.Errorf("SetEnv(%q, %q) = %q, want %q", tt.env, tt.set, got, tt.want)
		}
	}
}

func FuzzParseSnapshotID(f *testing.F) {
	f.Add(NewSnapshotID().String())
	f.Add("snp_")
	f.Add("sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add("snp_aaaaaaaaaaaaaaaaaaaaaaaaa1")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSnapshotID(s)
		if err != nil {
			return
		}
		if id.String() != s || len(s) != 4+idRandomLen {
			t.Fatalf("accepted %q as %q", s, id)
		}
		if _, err := ParseSandboxID(s); err == nil {
			t.Fatalf("%q parses as a snapshot ID and a sandbox ID", s)
		}
	})
}

func FuzzParseSnapshotName(f *testing.F) {
	for _, s := range []string{"my-snapshot", "snp_x", "", "a", "-a", "a:b", "a/b", "x.y_z-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSnapshotName(s)
		if err != nil {
			return
		}
		if n.String() != s || len(s) == 0 || len(s) > MaxSnapshotNameLen || strings.ContainsAny(s, ":/ \x00") {
			t.Fatalf("accepted %q as %q", s, n)
		}
		if _, err := ParseSnapshotID(s); err == nil {
			t.Fatalf("%q parses as a snapshot name and a snapshot ID", s)
		}
	})
}

func TestSnapshotIDAndForkCount(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{NewSnapshotID().String(), true},
		{NewSandboxID().String(), false},
		{"snp_../../etc/passwd", false},
		{"", false},
	} {
		if _, err := ParseSnapshotID(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParseSnapshotID(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
	for n, ok := range map[int]bool{0: false, 1: true, 16: true, 17: false, -1: false} {
		if err := CheckForkCount(n); (err == nil) != ok {
			t.Errorf("CheckForkCount(%d) = %v, want ok %v", n, err, ok)
		}
	}
	for _, s := range []SnapshotState{SnapshotCreating, SnapshotReady, SnapshotFailed, SnapshotDeleting} {
		if got, err := ParseSnapshotState(string(s)); err != nil || got != s {
			t.Errorf("ParseSnapshotState(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseSnapshotState("gone"); err == nil {
		t.Error("ParseSnapshotState accepted gone")
	}
}
