package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNothingWiredAfterConstruction keeps docs/architecture.md's claim
// true: the assembly gives every part its collaborators when it makes it,
// and never writes a field of a part it made (s.templates.Egress = …) or
// calls a setter on one afterwards (languages.WithTemplates(…)).
func TestNothingWiredAfterConstruction(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.IsExported() {
						if _, deep := sel.X.(*ast.SelectorExpr); deep {
							t.Errorf("%s: a part's field is written after its construction", fset.Position(n.Pos()))
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (strings.HasPrefix(sel.Sel.Name, "With") || strings.HasPrefix(sel.Sel.Name, "Set")) {
					if _, isPkg := sel.X.(*ast.Ident); isPkg && isImportedPackage(f, sel.X.(*ast.Ident).Name) {
						return true // a package's option constructor (job.WithServer), not a setter
					}
					t.Errorf("%s: %s sets a collaborator after construction", fset.Position(n.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}

// isImportedPackage says whether name is an import of f.
func isImportedPackage(f *ast.File, name string) bool {
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		if imp.Name != nil && imp.Name.Name == name || imp.Name == nil && filepath.Base(path) == name {
			return true
		}
	}
	return false
}
