package model

import (
	"errors"
	"strings"
	"testing"
)

func TestParseFileMetadata(t *testing.T) {
	long := strings.Repeat("v", MaxFileMetadataValue)
	many := map[string]string{}
	for i := range MaxFileMetadataEntries + 1 {
		many[string(rune('a'+i%26))+strings.Repeat("x", i)] = "1"
	}
	big := map[string]string{}
	for i := range 4 {
		big[string(rune('a'+i))] = long
	}
	for _, tc := range []struct {
		name string
		in   map[string]string
		want FileMetadata
		ok   bool
	}{
		{"nil", nil, nil, true},
		{"empty", map[string]string{}, nil, true},
		{"lowercased", map[string]string{"Author": "Mish", "x-y.z": ""}, FileMetadata{"author": "Mish", "x-y.z": ""}, true},
		{"space in key", map[string]string{"bad key": "v"}, nil, false},
		{"empty key", map[string]string{"": "v"}, nil, false},
		{"newline in value", map[string]string{"k": "a\nb"}, nil, false},
		{"newline in key", map[string]string{"k\n": "v"}, nil, false},
		{"non-ASCII value", map[string]string{"k": "é"}, nil, false},
		{"colon in key", map[string]string{"a:b": "v"}, nil, false},
		{"slash in key", map[string]string{"../x": "v"}, nil, false},
		{"key too long", map[string]string{strings.Repeat("k", MaxFileMetadataKey+1): "v"}, nil, false},
		{"value too long", map[string]string{"k": long + "v"}, nil, false},
		{"case duplicate", map[string]string{"K": "1", "k": "2"}, nil, false},
		{"too many", many, nil, false},
		{"too many bytes", big, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFileMetadata(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrBadFileMetadata) {
					t.Fatalf("err %v does not wrap ErrBadFileMetadata", err)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func FuzzParseFileMetadata(f *testing.F) {
	f.Add("author", "mish", "Purpose", "upload")
	f.Add("bad key", "v", "", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m, err := ParseFileMetadata(map[string]string{k1: v1, k2: v2})
		if err != nil {
			return
		}
		total := 0
		for k, v := range m {
			if k == "" || k != strings.ToLower(k) || !isToken(k) || !isPrintableASCII(v) || strings.ContainsAny(k, "/\x00:") {
				t.Fatalf("accepted %q=%q", k, v)
			}
			total += len(k) + len(v)
		}
		if total > MaxFileMetadataBytes || len(m) > MaxFileMetadataEntries {
			t.Fatalf("accepted %d bytes, %d entries", total, len(m))
		}
	})
}
