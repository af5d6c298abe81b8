package httpapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadModelsAreReadThroughTheFence: the server's read models are only
// reached through readModels, so no handler reads them without waiting for
// the writes acknowledged before it (a write no longer waits for its read
// models). New stores the field; nothing else may touch it.
func TestReadModelsAreReadThroughTheFence(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	uses := 0
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "queries" {
						return true
					}
					uses++
					if fn.Name.Name != "readModels" {
						t.Errorf("%s: %s reads the read models without the fence; use readModels", fset.Position(sel.Pos()), fn.Name.Name)
					}
					return true
				})
			}
		}
	}
	if uses == 0 {
		t.Fatal("found no use of the queries field: the check looks at nothing")
	}
}
