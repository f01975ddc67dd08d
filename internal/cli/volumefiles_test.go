package cli

import "testing"

func TestVolumeFileArg(t *testing.T) {
	for _, tc := range []struct {
		in       string
		needPath bool
		vol      string
		path     string
		ok       bool
	}{
		{"data", false, "data", "/", true},
		{"data:", false, "data", "/", true},
		{"data:/a/b", true, "data", "/a/b", true},
		{"data:a/b", true, "data", "/a/b", true},
		{"vol_aaaaaaaaaaaaaaaaaaaaaaaaaa:/x", true, "vol_aaaaaaaaaaaaaaaaaaaaaaaaaa", "/x", true},
		{"data", true, "", "", false},
		{"data:/../etc", true, "", "", false},
		{"../x:/a", true, "", "", false},
		{"vol_bad:/a", true, "", "", false},
	} {
		v, p, err := volumeFileArg(tc.in, tc.needPath)
		if (err == nil) != tc.ok || tc.ok && (v.String() != tc.vol || p.String() != tc.path) {
			t.Errorf("volumeFileArg(%q, %v) = %q %q %v", tc.in, tc.needPath, v, p, err)
		}
	}
}
