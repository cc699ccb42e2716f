// Command apicount counts a module's exported API per package, using go/ast
// on non-test files (build-tag-agnostic: every .go file not ending _test.go).
//
// Usage: go run ./scripts/apicount [-funcs N] [-files N] [module root]
//
// Per package it prints: exported top-level identifiers (types, funcs, vars,
// consts), exported methods on exported types, exported struct fields of
// exported types, and exported package-level vars (mutable surface). The
// "idents" column is what `go doc -short` lists at top level (types + funcs +
// vars + consts); methods and fields are listed separately as go doc -all shows them.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type count struct {
	types, funcs, vars, consts, methods, fields int
	varNames                                    []string
}

type fn struct {
	name  string
	lines int
}

func main() {
	nFuncs := flag.Int("funcs", 15, "largest functions to list")
	nFiles := flag.Int("files", 15, "largest files to list")
	flag.Parse()
	root := flag.Arg(0)
	if root == "" {
		root = "."
	}
	pkgs := map[string]*count{}
	var fns []fn
	type file struct {
		name  string
		lines int
	}
	var files []file
	fset := token.NewFileSet()
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			// A nested module (examples/agents) is not this module's API.
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil
		}
		lines := fset.File(f.Pos()).LineCount()
		isTest := strings.HasSuffix(p, "_test.go")
		if !isTest {
			files = append(files, file{rel, lines})
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && !isTest {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) > 0 {
					name = recvName(fd.Recv.List[0].Type) + "." + name
				}
				l := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				fns = append(fns, fn{fmt.Sprintf("%s:%d: %s", rel, fset.Position(fd.Pos()).Line, name), l})
			}
		}
		if isTest || strings.Contains(rel, "/internal/") || strings.HasPrefix(rel, "internal/") {
			return nil
		}
		dir := filepath.Dir(rel)
		if f.Name.Name == "main" {
			return nil
		}
		c := pkgs[dir]
		if c == nil {
			c = &count{}
			pkgs[dir] = c
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					c.funcs++
				} else if ast.IsExported(recvName(d.Recv.List[0].Type)) {
					c.methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						c.types++
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								if len(fl.Names) == 0 {
									if ast.IsExported(recvName(fl.Type)) {
										c.fields++
									}
								}
								for _, n := range fl.Names {
									if n.IsExported() {
										c.fields++
									}
								}
							}
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									if n.IsExported() {
										c.methods++
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							if d.Tok == token.VAR {
								c.vars++
								c.varNames = append(c.varNames, n.Name)
							} else {
								c.consts++
							}
						}
					}
				}
			}
		}
		return nil
	})
	var dirs []string
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	fmt.Printf("%-24s %6s %5s %5s %5s %6s | %7s %6s  %s\n", "package", "idents", "types", "funcs", "vars", "consts", "methods", "fields", "exported vars")
	var tot count
	for _, d := range dirs {
		c := pkgs[d]
		id := c.types + c.funcs + c.vars + c.consts
		if id == 0 && c.methods == 0 {
			continue
		}
		fmt.Printf("%-24s %6d %5d %5d %5d %6d | %7d %6d  %s\n", d, id, c.types, c.funcs, c.vars, c.consts, c.methods, c.fields, strings.Join(c.varNames, ","))
		tot.types += c.types
		tot.funcs += c.funcs
		tot.vars += c.vars
		tot.consts += c.consts
		tot.methods += c.methods
		tot.fields += c.fields
	}
	fmt.Printf("%-24s %6d %5d %5d %5d %6d | %7d %6d\n", "TOTAL", tot.types+tot.funcs+tot.vars+tot.consts, tot.types, tot.funcs, tot.vars, tot.consts, tot.methods, tot.fields)
	sort.Slice(files, func(i, j int) bool { return files[i].lines > files[j].lines })
	fmt.Printf("\nlargest non-test files (lines)\n")
	for i := 0; i < *nFiles && i < len(files); i++ {
		fmt.Printf("%6d  %s\n", files[i].lines, files[i].name)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].lines > fns[j].lines })
	fmt.Printf("\nlargest non-test functions (lines)\n")
	for i := 0; i < *nFuncs && i < len(fns); i++ {
		fmt.Printf("%6d  %s\n", fns[i].lines, fns[i].name)
	}
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	}
	return ""
}
