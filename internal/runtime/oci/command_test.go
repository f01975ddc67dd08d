package oci

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out, want string
		wantErr   bool
	}{
		{"runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\n", "1.1.5+ds1", false},
		{"crun version 1.8.1\ncommit: f8a096be\n", "1.8.1", false},
		{"runsc version VERSION_MISSING\nspec: 1.2.1\n", "VERSION_MISSING", false},
		{"runsc version release-20240101.0\n", "release-20240101.0", false},
		{"", "", true},
		{"something else\n", "", true},
		{"x version \n", "", true},
		{"x version a b\n", "", true},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.out)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q, error %v", tt.out, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseState(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ContainerState
		wantErr bool
	}{
		{"runc running", `{"ociVersion":"1.0.2-dev","id":"sbx_a","pid":42,"status":"running","bundle":"/b"}`, ContainerState{"sbx_a", 42, "running"}, false},
		{"runsc stopped reports pid -1", `{"id":"sbx_a","pid":-1,"status":"stopped"}`, ContainerState{"sbx_a", 0, "stopped"}, false},
		{"missing status", `{"id":"sbx_a","pid":1}`, ContainerState{}, true},
		{"missing id", `{"status":"running","pid":1}`, ContainerState{}, true},
		{"not json", `container does not exist`, ContainerState{}, true},
		{"trailing data", `{"id":"a","status":"running","pid":1}{}`, ContainerState{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseState([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseState = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	a, b := model.NewSandboxID(), model.NewSandboxID()
	ids, other := ParseList(a.String() + "\n\n  " + b.String() + "  \nairlock-probe-0011\n")
	if !slices.Equal(ids, []model.SandboxID{a, b}) || !slices.Equal(other, []string{"airlock-probe-0011"}) {
		t.Fatalf("ParseList = %v, %v", ids, other)
	}
}

func FuzzParseVersion(f *testing.F) {
	f.Add("runc version 1.1.5\n")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err == nil && (v == "" || strings.ContainsAny(v, " \t\n")) {
			t.Fatalf("ParseVersion(%q) = %q", s, v)
		}
	})
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"id":"sbx_a","pid":42,"status":"running"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseState(data)
		if err == nil && (st.ID == "" || st.Status == "" || st.Pid < 0) {
			t.Fatalf("ParseState(%q) = %+v", data, st)
		}
	})
}

func FuzzParseList(f *testing.F) {
	f.Add("sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa\nother\n")
	f.Fuzz(func(t *testing.T, s string) {
		ids, _ := ParseList(s)
		for _, id := range ids {
			if _, err := model.ParseSandboxID(id.String()); err != nil {
				t.Fatalf("ParseList returned invalid ID %q", id)
			}
		}
	})
}
