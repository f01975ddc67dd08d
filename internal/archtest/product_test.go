package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockdev/airlock/internal/airtest"
)

const module = "github.com/airlockdev/airlock"

// benchOnly are the packages the product binary must not link: the
// benchmarks (cmd/airlock-bench; `airlock bench` runs that binary) and the
// test helpers they use.
var benchOnly = []string{
	"internal/bench",
	"internal/nodebench",
	"internal/pgcluster",
	"internal/pgtest",
	"internal/egress/fakenet",
	"internal/egress/netnstest",
	"internal/airtest",
}

// TestProductLinksNoBenchmark walks the module's imports from cmd/airlock
// (the non-test files of each package, every build tag at once, so it sees
// a superset of what any build links) and fails if it reaches a package of
// benchOnly or one below it.
func TestProductLinksNoBenchmark(t *testing.T) {
	root := airtest.ModuleRoot(t)
	via := map[string]string{"cmd/airlock": ""} // package -> the package that imports it
	queue := []string{"cmd/airlock"}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		for _, imp := range moduleImports(t, root, pkg) {
			if _, seen := via[imp]; seen {
				continue
			}
			via[imp] = pkg
			queue = append(queue, imp)
		}
	}
	pkgs := make([]string, 0, len(via))
	for pkg := range via {
		pkgs = append(pkgs, pkg)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		for _, banned := range benchOnly {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				chain := []string{pkg}
				for p := via[pkg]; p != ""; p = via[p] {
					chain = append(chain, p)
				}
				t.Errorf("cmd/airlock links %s (imported by %s); the benchmarks belong in cmd/airlock-bench", pkg, strings.Join(chain[1:], " ← "))
			}
		}
	}
	if len(via) < 10 {
		t.Fatalf("found only %d packages under cmd/airlock; the walk is broken", len(via))
	}
}

// moduleImports returns the module's packages that pkg's non-test files
// import, relative to the module root.
func moduleImports(t *testing.T, root, pkg string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, pkg))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, pkg, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rel, ok := strings.CutPrefix(p, module+"/"); ok {
				out = append(out, rel)
			}
		}
	}
	return out
}
