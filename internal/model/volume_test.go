package model

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestParseVolumeRef(t *testing.T) {
	id := NewVolumeID()
	for _, tc := range []struct {
		in   string
		want VolumeRef
		ok   bool
	}{
		{id.String(), VolumeRef{ID: id}, true},
		{"data", VolumeRef{Name: "data"}, true},
		{"my-vol_1.2", VolumeRef{Name: "my-vol_1.2"}, true},
		{"vol_short", VolumeRef{}, false},             // looks like an ID, is not one
		{"", VolumeRef{}, false},                      // empty
		{"-lead", VolumeRef{}, false},                 // must start alphanumeric
		{"a/b", VolumeRef{}, false},                   // no slash
		{"../x", VolumeRef{}, false},                  // no traversal
		{"a b", VolumeRef{}, false},                   // no space
		{strings.Repeat("a", 64), VolumeRef{}, false}, // too long
		{strings.Repeat("a", 63), VolumeRef{Name: VolumeName(strings.Repeat("a", 63))}, true},
	} {
		got, err := ParseVolumeRef(tc.in)
		if tc.ok != (err == nil) || (tc.ok && got != tc.want) {
			t.Errorf("ParseVolumeRef(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseVolumeRef(%q) error %v does not wrap ErrInvalid", tc.in, err)
		}
	}
}

func TestParseVolumePath(t *testing.T) {
	for _, ok := range []string{"/data", "/home/user/data", "/mnt/vol", "/var/lib/app", "/tmp/x", "/etc/app", "/procx", "/devices"} {
		if _, err := ParseVolumePath(ok); err != nil {
			t.Errorf("ParseVolumePath(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "data", "/", "/proc", "/proc/1", "/sys/fs", "/dev", "/dev/shm", "/.airlock", "/.airlock/run",
		"/etc/airlock", "/tmp", "/etc", "/usr", "/home", "/root", "/data/../proc", "/data/", "//data"} {
		if _, err := ParseVolumePath(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseVolumePath(%q) err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestCheckVolumeMountPaths(t *testing.T) {
	a, b := NewVolumeID(), NewVolumeID()
	for _, tc := range []struct {
		name   string
		mounts []VolumeMount
		ok     bool
	}{
		{"none", nil, true},
		{"two apart", []VolumeMount{{Volume: a, Path: "/a"}, {Volume: b, Path: "/b"}}, true},
		{"siblings with a common prefix", []VolumeMount{{Volume: a, Path: "/data"}, {Volume: b, Path: "/data2"}}, true},
		{"same path", []VolumeMount{{Volume: a, Path: "/a"}, {Volume: b, Path: "/a"}}, false},
		{"nested", []VolumeMount{{Volume: a, Path: "/a"}, {Volume: b, Path: "/a/b"}}, false},
		{"nested reversed", []VolumeMount{{Volume: a, Path: "/a/b"}, {Volume: b, Path: "/a"}}, false},
		{"same volume twice", []VolumeMount{{Volume: a, Path: "/a"}, {Volume: a, Path: "/b"}}, false},
	} {
		if err := CheckVolumeMountPaths(tc.mounts); tc.ok != (err == nil) {
			t.Errorf("%s: CheckVolumeMountPaths = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	many := make([]VolumeMount, MaxVolumeMounts+1)
	for i := range many {
		many[i] = VolumeMount{Volume: NewVolumeID(), Path: GuestPath("/v" + strings.Repeat("x", i+1))}
	}
	if err := CheckVolumeMountPaths(many); err == nil {
		t.Errorf("%d mounts accepted", len(many))
	}
}

func TestParseVolumeSize(t *testing.T) {
	for _, tc := range []struct {
		mib int64
		ok  bool
	}{{MinVolumeMiB, true}, {MinVolumeMiB - 1, false}, {0, false}, {-1, false}, {1024, true}, {MaxVolumeMiB, true}, {MaxVolumeMiB + 1, false}} {
		if _, err := ParseVolumeSize(tc.mib); tc.ok != (err == nil) {
			t.Errorf("ParseVolumeSize(%d) = %v, want ok=%v", tc.mib, err, tc.ok)
		}
	}
}

func FuzzParseVolumeRef(f *testing.F) {
	for _, s := range []string{"data", "vol_abcdefghijklmnopqrstuvwxyz", string(NewVolumeID()), "-x", "a/b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseVolumeRef(s)
		if err != nil {
			return
		}
		if (r.ID == "") == (r.Name == "") {
			t.Fatalf("%q parsed to %+v: exactly one of ID and name must be set", s, r)
		}
		if strings.ContainsAny(s, "/\x00 ") || strings.Contains(s, "..") && r.ID != "" {
			t.Fatalf("accepted %q", s)
		}
		again, err := ParseVolumeRef(r.String())
		if err != nil || again != r {
			t.Fatalf("%q does not round-trip: %+v %v", s, again, err)
		}
	})
}

func FuzzParseVolumePath(f *testing.F) {
	for _, s := range []string{"/data", "/proc", "/dev/x", "/.airlock/bin", "/", "/a/../proc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseVolumePath(s)
		if err != nil {
			return
		}
		if _, err := ParseGuestPath(string(p)); err != nil {
			t.Fatalf("accepted %q, not a guest path: %v", p, err)
		}
		for _, tree := range volumeForbiddenTrees {
			if string(p) == tree || strings.HasPrefix(string(p), tree+"/") {
				t.Fatalf("accepted %q under %s", p, tree)
			}
		}
		if p == "/" {
			t.Fatalf("accepted /")
		}
	})
}

func TestParseVolumeFilePath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/", "/", true},
		{"/a/b.txt", "/a/b.txt", true},
		{"a/b", "/a/b", true},
		{"", "", false},
		{"/a/../b", "", false},
		{"../etc/passwd", "", false},
		{"..", "", false},
		{"/a//b", "", false},
		{"/a/./b", "", false},
		{"/a/", "", false},
		{"/a\x00b", "", false},
		{"/" + strings.Repeat("x", 256), "", false},
	} {
		p, err := ParseVolumeFilePath(tc.in)
		if (err == nil) != tc.ok || err == nil && p.String() != tc.want {
			t.Errorf("ParseVolumeFilePath(%q) = %q, %v; want %q ok=%v", tc.in, p, err, tc.want, tc.ok)
		}
	}
	p, _ := ParseVolumeFilePath("/a/b")
	if dir, name := p.Split(); dir != "/a" || name != "b" {
		t.Errorf("Split(/a/b) = %q %q", dir, name)
	}
	if dir, name := VolumeFilePath("/a").Split(); dir != "/" || name != "a" || dir.Join(name) != "/a" {
		t.Errorf("Split(/a) = %q %q", dir, name)
	}
	if VolumeFilePath("/").Rel() != "." || p.Rel() != "a/b" {
		t.Errorf("Rel")
	}
}

func FuzzParseVolumeFilePath(f *testing.F) {
	for _, s := range []string{"/", "a", "/a/b", "../x", "/a/..", "a//b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseVolumeFilePath(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(string(p), "/") || path.Clean(string(p)) != string(p) || strings.Contains(string(p), "\x00") {
			t.Fatalf("ParseVolumeFilePath(%q) = %q: not absolute and clean", s, p)
		}
		for _, c := range strings.Split(string(p), "/") {
			if c == ".." || c == "." {
				t.Fatalf("ParseVolumeFilePath(%q) = %q has %q", s, p, c)
			}
		}
		if again, err := ParseVolumeFilePath(string(p)); err != nil || again != p {
			t.Fatalf("not stable: %q → %q, %v", p, again, err)
		}
		dir, name := p.Split()
		if !p.IsRoot() && dir.Join(name) != p {
			t.Fatalf("Split/Join of %q: %q %q", p, dir, name)
		}
	})
}
