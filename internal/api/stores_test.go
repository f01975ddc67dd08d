package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// The handler groups with a store interface of their own (stores.go) and
// the ones that use none reach the store only through it: none of their
// files names Config.Store.
func TestHandlerGroupsUseTheirStores(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for _, name := range []string{
		"sandboxes.go", "processes.go", "files.go", "lifecycle.go", "pools.go", // sandboxStore, poolStore, or Config.Sandboxes and Config.Guests
		"idempotency.go", "mutation.go", // idempotencyStore
	} {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Store" {
				return true
			}
			if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "cfg" {
				t.Errorf("%s: uses cfg.Store; use its group's interface in a.stores (stores.go)", fset.Position(sel.Pos()))
			}
			return true
		})
	}
}
