package model_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/model"
)

func TestParseSnapshotStorage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want model.SnapshotStorage
		ok   bool
	}{
		{"", model.SnapshotLocal, true},
		{"saving", model.SnapshotSaving, true},
		{"stored", model.SnapshotStored, true},
		{"local", "", false}, // the name shown, not a stored value
		{"Stored", "", false},
	} {
		got, err := model.ParseSnapshotStorage(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseSnapshotStorage(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, model.ErrInvalid) {
			t.Errorf("ParseSnapshotStorage(%q): %v does not wrap ErrInvalid", tc.in, err)
		}
	}
	if model.SnapshotLocal.String() != "local" || model.SnapshotStored.String() != "stored" {
		t.Error("String")
	}
}

func FuzzParseBlobDigest(f *testing.F) {
	for _, s := range []string{"sha256:" + strings.Repeat("a", 64), "", "sha256:", "sha256:" + strings.Repeat("A", 64), "md5:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := model.ParseBlobDigest(s)
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("ParseBlobDigest(%q): %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if d.String() != s || len(s) != 71 || !strings.HasPrefix(s, "sha256:") || strings.ContainsAny(s[7:], "ABCDEF/.") {
			t.Fatalf("ParseBlobDigest(%q) accepted %q", s, d)
		}
	})
}
