package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayout_MainOnlyDispatches: cmd/shop reads settings and dispatches
// subcommands; the work is in packages. Its non-test files import no
// domain package but through app (the service), bench (the benchmarks)
// and load (the k6 scripts as a load test), so a reader finds each flow in
// its package, not here.
func TestLayout_MainOnlyDispatches(t *testing.T) {
	const module = "github.com/shop-example/shop/internal/"
	allowed := []string{"app", "bench", "load", "platform/"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rest, internal := strings.CutPrefix(path, module)
			if !internal {
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || rest == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(rest, a))
			}
			if !ok {
				t.Errorf("%s imports %s: cmd/shop reaches the domain only through app, bench and load", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no files checked")
	}
}
