package mountinfo

import (
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Mount
		wantErr bool
	}{
		{
			name: "proc(5) example",
			line: `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
			want: Mount{ID: 36, ParentID: 35, Major: 98, Minor: 0, Root: "/mnt1", MountPoint: "/mnt2",
				Options: "rw,noatime", Optional: []string{"master:1"}, FSType: "ext3", Source: "/dev/root",
				SuperOptions: "rw,errors=continue"},
		},
		{
			name: "no optional fields, cgroup",
			line: `35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory`,
			want: Mount{ID: 35, ParentID: 31, Major: 0, Minor: 32, Root: "/", MountPoint: "/sys/fs/cgroup/memory",
				Options: "rw,relatime", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,memory"},
		},
		{
			name: "escaped space and backslash",
			line: `100 22 0:50 / /tmp/a\040b\134c rw - overlay overlay rw,lowerdir=/x`,
			want: Mount{ID: 100, ParentID: 22, Major: 0, Minor: 50, Root: "/", MountPoint: `/tmp/a b\c`,
				Options: "rw", FSType: "overlay", Source: "overlay", SuperOptions: "rw,lowerdir=/x"},
		},
		{name: "too short", line: `1 2 3:4 / /`, wantErr: true},
		{name: "no separator", line: `1 2 3:4 / / rw a b c d`, wantErr: true},
		{name: "bad id", line: `x 2 3:4 / / rw - t s o`, wantErr: true},
		{name: "bad device", line: `1 2 34 / / rw - t s o`, wantErr: true},
		{name: "truncated escape", line: `1 2 3:4 / /a\04 rw - t s o`, wantErr: true},
		{name: "bad escape digit", line: `1 2 3:4 / /a\09x rw - t s o`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLine(tt.line)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseLine(%q) = %+v, want error", tt.line, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLine: %v", err)
			}
			if got.ID != tt.want.ID || got.ParentID != tt.want.ParentID || got.Major != tt.want.Major ||
				got.Minor != tt.want.Minor || got.Root != tt.want.Root || got.MountPoint != tt.want.MountPoint ||
				got.Options != tt.want.Options || strings.Join(got.Optional, " ") != strings.Join(tt.want.Optional, " ") ||
				got.FSType != tt.want.FSType || got.Source != tt.want.Source || got.SuperOptions != tt.want.SuperOptions {
				t.Fatalf("ParseLine(%q)\n got %+v\nwant %+v", tt.line, got, tt.want)
			}
		})
	}
}

func TestHasSuperOption(t *testing.T) {
	m := Mount{SuperOptions: "rw,cpu,cpuacct"}
	if !m.HasSuperOption("cpu") || !m.HasSuperOption("cpuacct") || m.HasSuperOption("cpuset") {
		t.Fatalf("HasSuperOption wrong for %q", m.SuperOptions)
	}
}

func TestReadSelf(t *testing.T) {
	mounts, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range mounts {
		if m.MountPoint == "/proc" && m.FSType == "proc" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no /proc mount among %d mounts", len(mounts))
	}
}

func TestParseSkipsBlankLinesAndReportsLine(t *testing.T) {
	in := "22 27 0:21 / /proc rw - proc proc rw\n\nbroken\n"
	_, err := Parse(strings.NewReader(in))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("Parse error = %v, want one naming line 3", err)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add(`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`)
	f.Add(`100 22 0:50 / /tmp/a\040b rw - overlay overlay rw`)
	f.Add(`1 2 3:4 / /a\04 rw - t s o`)
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParseLine(line)
		if err != nil {
			return
		}
		if m.FSType == "" && !strings.Contains(line, " -  ") {
			t.Fatalf("accepted line without fs type: %q", line)
		}
	})
}

func FuzzUnescape(f *testing.F) {
	f.Add(`/a\040b`)
	f.Add(`\134\134`)
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Unescape(s)
		if err != nil {
			return
		}
		if !strings.Contains(s, `\`) && u != s {
			t.Fatalf("Unescape changed %q to %q", s, u)
		}
		if len(u) > len(s) {
			t.Fatalf("Unescape grew %q to %q", s, u)
		}
	})
}
