package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckStaticAgent(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		wantErr string
	}{
		{"/bin/busybox", ""}, // Debian's busybox-static
		{"/bin/ls", "dynamically linked"},
		{notELF, "not an ELF"},
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
	}
	for _, tt := range tests {
		if _, err := os.Stat(tt.path); err != nil && tt.wantErr == "" {
			t.Skipf("%s missing: install busybox-static", tt.path)
		}
		err := checkStaticAgent(tt.path)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("checkStaticAgent(%s) = %v, want %q", tt.path, err, tt.wantErr)
		}
	}
}
