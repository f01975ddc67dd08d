package archtest

import (
	"bufio"
	"bytes"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

// goFiles returns every .go file of the module, relative to its root,
// skipping testdata and hidden directories.
func goFiles(t *testing.T) (root string, files []string) {
	t.Helper()
	root = airtest.ModuleRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("found no Go files")
	}
	return root, files
}

func TestNoProductionFileOver1000Lines(t *testing.T) {
	root, files := goFiles(t)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n := countLines(t, filepath.Join(root, f))
		if n > 1000 {
			t.Errorf("%s has %d lines; production files must stay at or under 1000 (split it by concern)", f, n)
		}
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNoCatchAllPackageNames(t *testing.T) {
	banned := map[string]bool{"common": true, "shared": true, "util": true, "utils": true, "helper": true, "helpers": true, "misc": true, "core": true}
	_, files := goFiles(t)
	seen := map[string]bool{}
	for _, f := range files {
		dir := filepath.Dir(f)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if banned[filepath.Base(dir)] {
			t.Errorf("package directory %s has a catch-all name; name packages for what they are", dir)
		}
	}
}

func TestGofmt(t *testing.T) {
	root, files := goFiles(t)
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		out, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if !bytes.Equal(src, out) {
			t.Errorf("%s is not gofmt-formatted (run gofmt -w %s)", f, f)
		}
	}
}
