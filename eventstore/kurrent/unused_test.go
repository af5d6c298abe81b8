package kurrent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdapterCallsNoneOfWhatTheDoubleLacks: the protocol double does not
// serve stream deletion, tombstones or stream metadata (the official
// client's tests of them fail against it, by design), which is sound only
// while the adapter calls none of them.
func TestAdapterCallsNoneOfWhatTheDoubleLacks(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	lacking := map[string]bool{"DeleteStream": true, "TombstoneStream": true, "SetStreamMetadata": true, "GetStreamMetadata": true}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && lacking[sel.Sel.Name] {
				t.Errorf("%s: the adapter calls %s, which the double does not serve", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no adapter source checked")
	}
}
