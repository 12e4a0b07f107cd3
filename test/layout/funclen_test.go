// Package layout checks rules of the source tree's shape that no compiler
// enforces.
package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressflow/egressflow/test/kubetest"
)

// maxFuncLines is the longest a function of controller/ or cmd/ may be,
// from its signature to its closing brace: one a reader holds at a
// glance. Generated code and tests are not counted.
const maxFuncLines = 100

// TestNoLongFunctions: no function in controller/ or cmd/ is longer than
// maxFuncLines.
func TestNoLongFunctions(t *testing.T) {
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range []string{"controller", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "generated" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				checked++
				start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
				if n := end.Line - start.Line + 1; n > maxFuncLines {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d: %s is %d lines, more than %d", rel, start.Line, fn.Name.Name, n, maxFuncLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 500 {
		t.Fatalf("only %d functions checked: the walk missed the tree", checked)
	}
}
