package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// copierPackage is the one package that copies root filesystem trees and
// their files (see its doc).
const copierPackage = "internal/rootfs/treecopy"

// The copier rule, checked on every production Go file outside
// copierPackage, by syntax alone (no type checking, so it is fast and
// cannot be flaky):
//
//  1. no reference to the kernel's file-copying primitives through
//     golang.org/x/sys/unix or syscall, whatever the import is named:
//     CopyFileRange, Sendfile, Splice, IoctlFileClone, IoctlFileCloneRange,
//     IoctlFileDedupeRange, FICLONE, FICLONERANGE, FIDEDUPERANGE;
//  2. no exec.Command or exec.CommandContext whose program is a string
//     literal naming cp, rsync or tar (bare or as a path);
//  3. no os.Link, unix.Link or unix.Linkat in a function that walks a tree
//     (calls filepath.Walk, filepath.WalkDir or fs.WalkDir), or in a
//     function literal given to such a walk: re-creating hard links while
//     walking is copying a tree.
//
// What it cannot see: io.Copy between two *os.File values (it needs types);
// that is left to review, and the copy_file_range that such an io.Copy
// would use is what rule 1 keeps out.
var copyPrimitives = map[string]bool{
	"CopyFileRange": true, "Sendfile": true, "Splice": true,
	"IoctlFileClone": true, "IoctlFileCloneRange": true, "IoctlFileDedupeRange": true,
	"FICLONE": true, "FICLONERANGE": true, "FIDEDUPERANGE": true,
}

var copyPrograms = map[string]bool{"cp": true, "rsync": true, "tar": true}

// copierViolations returns the rule's findings in one parsed file.
func copierViolations(fset *token.FileSet, f *ast.File) []string {
	names := map[string]string{} // local import name -> import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	pkgOf := func(e ast.Expr) (path, sel string) {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", ""
		}
		id, ok := s.X.(*ast.Ident)
		if !ok || id.Obj != nil { // a local variable, not a package
			return "", ""
		}
		return names[id.Name], s.Sel.Name
	}
	var out []string
	report := func(n ast.Node, format string, args ...any) {
		out = append(out, fset.Position(n.Pos()).String()+": "+fmt.Sprintf(format, args...))
	}
	// A walk is the standard library's, or a tree walker of our own: a
	// function or method whose name starts with walk/Walk (walkTree, …).
	isWalk := func(c *ast.CallExpr) bool {
		p, s := pkgOf(c.Fun)
		if (p == "path/filepath" && (s == "Walk" || s == "WalkDir")) || (p == "io/fs" && s == "WalkDir") {
			return true
		}
		switch f := c.Fun.(type) {
		case *ast.Ident:
			return strings.HasPrefix(f.Name, "walk") || strings.HasPrefix(f.Name, "Walk")
		case *ast.SelectorExpr:
			return p == "" && (strings.HasPrefix(f.Sel.Name, "walk") || strings.HasPrefix(f.Sel.Name, "Walk"))
		}
		return false
	}
	// A link is os.Link, unix/syscall Link(at), or a Link method with two
	// arguments on a value (os.Root.Link).
	isLink := func(c *ast.CallExpr) bool {
		p, s := pkgOf(c.Fun)
		if (p == "os" && s == "Link") || ((p == "golang.org/x/sys/unix" || p == "syscall") && (s == "Link" || s == "Linkat")) {
			return true
		}
		f, ok := c.Fun.(*ast.SelectorExpr)
		return ok && p == "" && f.Sel.Name == "Link" && len(c.Args) == 2
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if p, s := pkgOf(n); (p == "golang.org/x/sys/unix" || p == "syscall") && copyPrimitives[s] {
				report(n, "%s.%s copies file content: use %s", filepath.Base(p), s, copierPackage)
			}
		case *ast.CallExpr:
			p, s := pkgOf(n.Fun)
			if p == "os/exec" && (s == "Command" || s == "CommandContext") {
				i := 0
				if s == "CommandContext" {
					i = 1
				}
				if len(n.Args) > i {
					if lit, ok := n.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						prog, _ := strconv.Unquote(lit.Value)
						if copyPrograms[filepath.Base(prog)] {
							report(n, "exec of %s copies files: use %s", prog, copierPackage)
						}
					}
				}
			}
		case *ast.FuncDecl:
			if n.Body == nil {
				return true
			}
			walks := false
			ast.Inspect(n.Body, func(m ast.Node) bool {
				if c, ok := m.(*ast.CallExpr); ok && isWalk(c) {
					walks = true
				}
				return !walks
			})
			if walks {
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if c, ok := m.(*ast.CallExpr); ok && isLink(c) {
						report(c, "hard link made in a function that walks a tree (%s): copying trees is %s's job", n.Name.Name, copierPackage)
					}
					return true
				})
			}
		}
		return true
	})
	return out
}

func TestOnlyTheCopierCopiesTrees(t *testing.T) {
	root, files := goFiles(t)
	fset := token.NewFileSet()
	for _, rel := range files {
		if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(filepath.ToSlash(rel), copierPackage+"/") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range copierViolations(fset, f) {
			t.Error(v)
		}
	}
}

// The rule finds what it is meant to find (so that a rule that matches
// nothing does not pass silently), and not look-alikes.
func TestCopierRuleCatchesCopies(t *testing.T) {
	const src = `package bad

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	sys "golang.org/x/sys/unix"
)

func clone(a, b int) { _ = sys.IoctlFileClone(a, b) }

func rangeCopy() { sys.CopyFileRange(0, nil, 1, nil, 1, 0) }

func shell() { exec.Command("/bin/cp", "-a", "x", "y").Run() }

func walker(dst string) {
	filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		return os.Link(p, dst)
	})
}

func ownWalker(root *os.Root) {
	walkTree(".", func(p string) error {
		return root.Link(p, "copy/"+p)
	})
}

func walkTree(string, func(string) error) {}

func fine(os2 struct{ Link func(string, string) error }) {
	os.Link("a", "b") // a single link, no walk
	exec.Command("cpx").Run()
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "bad.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := copierViolations(fset, f)
	want := []string{"IoctlFileClone", "CopyFileRange", "/bin/cp", "walker", "ownWalker"}
	if len(got) != len(want) {
		t.Fatalf("findings %q, want %d (%q)", got, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("finding %d = %q, want it to mention %s", i, got[i], w)
		}
	}
}
