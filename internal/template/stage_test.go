package template

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Even if the stager's own bookkeeping were wrong, os.Root keeps every write
// inside the staging root: simulate that by planting symlinks the stager
// believes are directories.
func TestStagerKernelContainment(t *testing.T) {
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	root := filepath.Join(tmp, "root")
	for _, d := range []string{outside, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(root, "rel")); err != nil {
		t.Fatal(err)
	}
	stg, err := newStager(root, DefaultLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stg.close()
	stg.kinds["abs"], stg.kinds["rel"] = kindDir, kindDir // the simulated bug
	stg.kinds["victim-link"] = kindFile
	if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(root, "victim-link")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := meta{mode: 0o644}
	for _, link := range []string{"abs", "rel"} {
		attempts := map[string]error{
			"file":     stg.file(ctx, link+"/pwned", m, 5, strings.NewReader("pwned")),
			"dir":      stg.dir(link+"/newdir", m),
			"symlink":  stg.symlink(link+"/l", "/", m),
			"hardlink": stg.hardlink(link+"/h", "victim-link"),
		}
		for op, err := range attempts {
			if err == nil {
				t.Errorf("%s through %s: succeeded", op, link)
			} else {
				t.Logf("%s through %s: %v", op, link, err)
			}
		}
	}
	stg.dirs = map[string]meta{"abs": {mode: 0o777}, "rel": {mode: 0o777}}
	if err := stg.finish(ctx); err == nil {
		t.Error("finish applied metadata through a symlink")
	}
	names := listDir(t, outside)
	if len(names) != 1 || names[0] != "victim" {
		t.Errorf("outside now holds %v", names)
	}
	fi, err := os.Stat(outside)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("outside's mode changed: %v %v", fi.Mode(), err)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "victim")); string(data) != "original" {
		t.Errorf("victim = %q", data)
	}
}

func TestCleanName(t *testing.T) {
	good := map[string]string{
		"a": "a", "./a": "a", "a/": "a", "a//b": "a/b", "./a/./b/": "a/b", ".": ".", "./": ".", "a/.": "a",
		"...": "...", "..a": "..a", "a..": "a..",
	}
	for in, want := range good {
		if got, err := cleanName(in); err != nil || got != want {
			t.Errorf("cleanName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/", "/a", "..", "../a", "a/..", "a/../b", "a/b/../../..", "a\x00b", "//a"} {
		if got, err := cleanName(in); err == nil {
			t.Errorf("cleanName(%q) = %q, want an error", in, got)
		}
	}
}
