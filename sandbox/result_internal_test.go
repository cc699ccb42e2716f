package sandbox

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStopWrittenOnlyByEnd: Result.Stop and Result.ExitCode are written in
// one function of the package, (*run).end, from what the host recorded; a
// Result literal sets neither. execDriver, which turns the driver's
// outcome into a Result, fills ExitCode of the scratch Result that end
// reads (the status of SystemExit), never Stop.
func TestStopWrittenOnlyByEnd(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	writers := map[string][]string{} // field -> functions writing it
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			where := fn.Name.Name
			if fn.Recv != nil {
				where = "(" + types(fn.Recv.List[0].Type) + ")." + where
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Stop" || sel.Sel.Name == "ExitCode") {
							writers[sel.Sel.Name] = append(writers[sel.Sel.Name], where)
						}
					}
				case *ast.CompositeLit:
					if id, ok := n.Type.(*ast.Ident); ok && id.Name == "Result" {
						for _, e := range n.Elts {
							if kv, ok := e.(*ast.KeyValueExpr); ok {
								if k, ok := kv.Key.(*ast.Ident); ok && (k.Name == "Stop" || k.Name == "ExitCode") {
									writers[k.Name] = append(writers[k.Name], where+" (literal)")
								}
							}
						}
					}
				}
				return true
			})
		}
	}
	for _, w := range writers["Stop"] {
		assert.Equal(t, "(*run).end", w, "Result.Stop is written outside end")
	}
	assert.NotEmpty(t, writers["Stop"])
	for _, w := range writers["ExitCode"] {
		assert.Contains(t, []string{"(*run).end", "(*instance).execDriver"}, w, "Result.ExitCode is written outside end")
	}
}

// types names a receiver type as Go prints it: "*run".
func types(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		return "*" + types(s.X)
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}
