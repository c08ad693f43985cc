package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// flowPackages are the four flows, each a pattern to copy; they share
// the skeleton of this package (Flow) rather than a dialect of their own.
var flowPackages = []string{"orders", "payments", "seats", "likes"}

// flowFiles parses the production files of each flow package.
func flowFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	for _, pkg := range flowPackages {
		dir := filepath.Join("..", "..", pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			path := filepath.Join(dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Join(pkg, name)] = f
		}
	}
	if len(out) == 0 {
		t.Fatal("no flow files found")
	}
	return out
}

// TestFlows_ShareOneSkeleton keeps each piece of the skeleton written
// once, here: no flow declares its own Locker, wraps the lock, loops on
// a lost race, words the "keeps changing" answer, translates a lost lock
// or counts a conflict other than through Flow.
func TestFlows_ShareOneSkeleton(t *testing.T) {
	forbidden := []struct {
		re  *regexp.Regexp
		use string
	}{
		{regexp.MustCompile(`type Locker interface`), "layers.Locker"},
		{regexp.MustCompile(`\.Do\(ctx`), "Flow.Lock or Flow.LockAll"},
		{regexp.MustCompile(`for attempt := 1; ;`), "Flow.Retry"},
		{regexp.MustCompile(`max\w*Retries`), "layers.MaxTries"},
		{regexp.MustCompile(`keeps changing`), "Flow.Retry's answer (Flow.KeepsChanging)"},
		{regexp.MustCompile(`ErrLockLost`), "the lock's own answer to a lost lease"},
		{regexp.MustCompile(`metrics\.Stopped\(|\.metrics\.Stopped\(`), "Flow.Stopped"},
		{regexp.MustCompile(`MustRegister\(`), "metrics.Register"},
	}
	for _, pkg := range flowPackages {
		dir := filepath.Join("..", "..", pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				for _, f := range forbidden {
					if f.re.MatchString(line) {
						t.Errorf("%s:%d: %q: use %s", path, i+1, strings.TrimSpace(line), f.use)
					}
				}
			}
		}
	}
}

// domainPackages are the lesson's packages whose production code must
// read as what runs.
var domainPackages = []string{"orders", "payments", "refunds", "seats", "likes", "inventory", "notify"}

// TestFlows_NoAblationSwitch keeps the production code of the domain
// packages free of ablation switches: no layers.Set held or passed, no
// layer asked whether it is on. A test takes a layer off by handing a
// flow a variant of one of its steps (harness/variants), never by a
// switch the production path reads.
func TestFlows_NoAblationSwitch(t *testing.T) {
	switches := regexp.MustCompile(`layers\.(On|Pick|Off)\(|\.On\(layers\.|\blayers\.Set\b`)
	found := 0
	for _, pkg := range domainPackages {
		dir := filepath.Join("..", "..", pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			found++
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				if switches.MatchString(line) {
					t.Errorf("%s:%d: %q: an ablation switch in production code; hand the flow a variant of the step instead (harness/variants)", path, i+1, strings.TrimSpace(line))
				}
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d production files in %v: the scan is broken", found, domainPackages)
	}
}

// TestFlows_ArgumentOrder keeps one argument order across the flows'
// functions: the context, what the call is about, then the layers on, the
// time now, the request's idempotency record, and the functions that
// decide last.
func TestFlows_ArgumentOrder(t *testing.T) {
	rank := func(typ string) int {
		switch typ {
		case "layers.Set":
			return 1
		case "time.Time":
			return 2
		case "*idempotency.Record":
			return 3
		}
		return 0
	}
	for path, f := range flowFiles(t) {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			last, lastType, seenFunc := 0, "", ""
			for _, field := range fn.Type.Params.List {
				typ := exprString(field.Type)
				if _, isFunc := field.Type.(*ast.FuncType); isFunc {
					seenFunc = typ
					continue
				}
				if seenFunc != "" {
					t.Errorf("%s: %s: %s after a function argument: functions go last", path, fn.Name.Name, typ)
				}
				r := rank(typ)
				if r == 0 {
					continue
				}
				if r < last {
					t.Errorf("%s: %s: %s after %s: want layers.Set, time.Time, *idempotency.Record in that order",
						path, fn.Name.Name, typ, lastType)
				}
				last, lastType = r, typ
			}
		}
	}
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.FuncType:
		return "func"
	}
	return ""
}
