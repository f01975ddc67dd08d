package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	tests := []struct {
		name        string
		base, extra []string
		want        []string
	}{
		{"empty gets PATH", nil, nil, []string{"PATH=" + DefaultPath}},
		{"request wins", []string{"A=1", "PATH=/x", "B=2"}, []string{"B=3", "C=4"}, []string{"A=1", "PATH=/x", "B=3", "C=4"}},
		{"request PATH", []string{"A=1"}, []string{"PATH=/mine"}, []string{"A=1", "PATH=/mine"}},
		{"duplicate in base", []string{"A=1", "A=2"}, nil, []string{"A=2", "PATH=" + DefaultPath}},
		{"empty value", []string{"A=1"}, []string{"A="}, []string{"A=", "PATH=" + DefaultPath}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mergeEnv(tt.base, tt.extra); !slices.Equal(got, tt.want) {
				t.Fatalf("mergeEnv = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("a/prog", 0o755)
	write("b/prog", 0o755)
	write("a/noexec", 0o644)
	write("b/noexec", 0o755)
	write("c/only-noexec", 0o644)
	if err := os.Mkdir(filepath.Join(dir, "a", "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	tests := []struct {
		file, path, cwd string
		want            string
		wantErr         error
	}{
		{"prog", a + ":" + b, "/", filepath.Join(a, "prog"), nil},
		{"prog", b + ":" + a, "/", filepath.Join(b, "prog"), nil},
		{"noexec", a + ":" + b, "/", filepath.Join(b, "noexec"), nil},
		{"only-noexec", c, "/", "", errNotExecutable},
		{"subdir", a, "/", "", errNotExecutable},
		{"missing", a + ":" + b, "/", "", errNotFound},
		{"prog", "", "/", "", errNotFound},
		{"prog", "a", dir, "a/prog", nil},
		{"prog", ":" + b, a, "./prog", nil},
		{"./prog", "", a, "./prog", nil},
		{"a/prog", "", dir, "a/prog", nil},
		{filepath.Join(a, "prog"), "", "/", filepath.Join(a, "prog"), nil},
		{filepath.Join(a, "noexec"), "", "/", "", errNotExecutable},
		{filepath.Join(a, "nothere"), "", "/", "", syscall.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.file+"@"+tt.path, func(t *testing.T) {
			got, err := lookPath(tt.file, tt.path, tt.cwd)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("lookPath = %q, %v; want %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("lookPath = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseSignal(t *testing.T) {
	for _, name := range []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"} {
		sig, err := parseSignal(name)
		if err != nil {
			t.Fatalf("parseSignal(%q): %v", name, err)
		}
		if got := signalName(sig); got != name {
			t.Fatalf("signalName(parseSignal(%q)) = %q", name, got)
		}
		if sig2, err := parseSignal("SIG" + name); err != nil || sig2 != sig {
			t.Fatalf("parseSignal(SIG%s) = %v, %v", name, sig2, err)
		}
	}
	for _, bad := range []string{"", "term", "SEGV", "0", "65", "-1", "SIG", strings.Repeat("X", 100)} {
		if _, err := parseSignal(bad); err == nil {
			t.Fatalf("parseSignal(%q) succeeded", bad)
		}
	}
	if got := signalName(syscall.SIGSEGV); got != "SEGV" {
		t.Fatalf("signalName(SIGSEGV) = %q", got)
	}
}
