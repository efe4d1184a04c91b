package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRoutesListsEveryRoute: Routes holds every Route constant of the
// package (read from its source, so that a route added anywhere in it
// is found), each once, and every one is a "METHOD /v1/..." pattern.
func TestRoutesListsEveryRoute(t *testing.T) {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{} // name → value
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Route") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: not a string literal", id.Name)
						continue
					}
					declared[id.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	routes := Routes()
	if len(declared) < 40 {
		t.Fatalf("found %d Route constants; the source was not read", len(declared))
	}
	for name, v := range declared {
		if !slices.Contains(routes, v) {
			t.Errorf("%s (%q) is not in Routes()", name, v)
		}
		if m, p, ok := strings.Cut(v, " "); !ok || m == "" || !strings.HasPrefix(p, "/v1/") {
			t.Errorf("%s = %q: not a METHOD /v1/... pattern", name, v)
		}
	}
	seen := map[string]bool{}
	for _, r := range routes {
		if seen[r] {
			t.Errorf("%q twice in Routes()", r)
		}
		seen[r] = true
	}
	if len(routes) != len(declared) {
		t.Errorf("Routes() has %d routes, the package declares %d", len(routes), len(declared))
	}
}
