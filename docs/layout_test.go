package docs_test

// DESIGN.md §4 is the one list of the repository's directories. A package
// added without its line, a line left behind by a removed package, or a
// package listed twice fails here; so does a package of the lesson
// (internal/) that imports one of the harness, directly or through
// another package of the module.

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	layoutFile    = "DESIGN.md"
	layoutSection = "4-packages"
)

// TestDocs_LayoutNamesEveryPackage fails when a directory under internal/,
// internal/platform/ or harness/ is missing from the layout list of DESIGN.md §4,
// named in it twice, or when the list names a directory that does not
// exist.
func TestDocs_LayoutNamesEveryPackage(t *testing.T) {
	entries, err := layoutEntries(t, layoutFile, layoutSection)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, parent := range []string{"internal", "internal/platform", "harness"} {
		found, err := os.ReadDir(filepath.Join("..", parent))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range found {
			if e.IsDir() {
				dirs = append(dirs, parent+"/"+e.Name())
			}
		}
	}
	if len(dirs) < 20 {
		t.Fatalf("found only %d directories under internal/: the scan is broken", len(dirs))
	}
	for _, err := range checkLayout(entries, dirs, func(dir string) bool {
		info, err := os.Stat(filepath.Join("..", dir))
		return err == nil && info.IsDir()
	}) {
		t.Errorf("%s §4: %v", layoutFile, err)
	}
}

// TestDocs_LayoutCheck shows what the layout check refuses.
func TestDocs_LayoutCheck(t *testing.T) {
	dirs := []string{"internal/a", "internal/platform", "internal/platform/x"}
	exists := func(dir string) bool { return slices.Contains(dirs, dir) || dir == "cmd/shop" }
	cases := []struct {
		name    string
		entries []string
		errs    int
	}{
		{"every one once", []string{"cmd/shop", "internal/platform", "internal/platform/x", "internal/a"}, 0},
		{"one missing", []string{"internal/platform", "internal/platform/x"}, 1},
		{"one twice", []string{"internal/platform", "internal/platform/x", "internal/a", "internal/a"}, 1},
		{"one that does not exist", []string{"internal/platform", "internal/platform/x", "internal/a", "internal/b"}, 1},
	}
	for _, tc := range cases {
		if errs := checkLayout(tc.entries, dirs, exists); len(errs) != tc.errs {
			t.Errorf("%s: %d errors %v, want %d", tc.name, len(errs), errs, tc.errs)
		}
	}
}

// checkLayout returns what is wrong with the layout's entries, given the
// directories that must each be named once and which directories exist.
func checkLayout(entries, dirs []string, exists func(string) bool) []error {
	var errs []error
	count := map[string]int{}
	for _, e := range entries {
		count[e]++
		if count[e] == 2 {
			errs = append(errs, fmt.Errorf("%s/ is named twice", e))
		}
		if count[e] == 1 && !exists(e) {
			errs = append(errs, fmt.Errorf("%s/ is named, but there is no such directory", e))
		}
	}
	for _, d := range dirs {
		if count[d] == 0 {
			errs = append(errs, fmt.Errorf("%s/ is not named: add its line", d))
		}
	}
	return errs
}

var (
	// A line of the list: a directory at the start (from the root), or
	// indented by two spaces under the directory above it.
	layoutTopRE   = regexp.MustCompile(`^([a-z0-9][\w./-]*)/(?:\s|$)`)
	layoutChildRE = regexp.MustCompile(`^  ([a-z0-9][\w.-]*)/(?:\s|$)`)
)

// layoutEntries returns the directories that the first fenced block of
// the section (by its anchor) of file names, one a line.
func layoutEntries(t *testing.T, file, anchor string) ([]string, error) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	in, fenced := false, false
	var out []string
	parent := ""
	for _, line := range strings.Split(string(b), "\n") {
		if m := headingRE.FindStringSubmatch(line); m != nil && !fenced {
			if in {
				break
			}
			in = slug(m[2]) == anchor
			continue
		}
		if !in {
			continue
		}
		if fenceRE.MatchString(line) {
			if fenced {
				return out, nil
			}
			fenced = true
			continue
		}
		if !fenced {
			continue
		}
		if m := layoutTopRE.FindStringSubmatch(line); m != nil {
			parent = m[1]
			out = append(out, parent)
		} else if m := layoutChildRE.FindStringSubmatch(line); m != nil && parent != "" {
			out = append(out, parent+"/"+m[1])
		}
	}
	return nil, fmt.Errorf("%s has no fenced list in its section #%s", file, anchor)
}

// TestDocs_LessonImportsNoHarness fails when a package under internal/,
// its tests aside, imports one under harness/, directly or through any
// other package of the module (docs, web, migrations, …): the harness
// proves the lesson from outside, and the lesson builds without it
// (DESIGN.md §4). Build tags do not hide a file: every non-test .go file
// counts.
func TestDocs_LessonImportsNoHarness(t *testing.T) {
	module, graph, err := moduleImports("..")
	if err != nil {
		t.Fatal(err)
	}
	if len(graph) < 30 || len(graph["internal/app"]) == 0 {
		t.Fatalf("found only %d packages, internal/app importing %d: the scan is broken", len(graph), len(graph["internal/app"]))
	}
	t.Logf("module %s: %d packages", module, len(graph))
	for _, err := range harnessImports(graph) {
		t.Error(err)
	}
}

// TestDocs_HarnessImportsCheck shows what the import check refuses.
func TestDocs_HarnessImportsCheck(t *testing.T) {
	cases := []struct {
		name  string
		graph map[string][]string
		errs  int
	}{
		{"the harness imports the lesson", map[string][]string{
			"internal/app": {"internal/orders"}, "internal/orders": nil, "harness/lab": {"internal/app"},
		}, 0},
		{"the lesson imports the harness", map[string][]string{
			"internal/app": {"harness/lab"}, "harness/lab": nil,
		}, 1},
		{"through a package of neither", map[string][]string{
			"internal/app": {"web"}, "web": {"harness/apptest"}, "harness/apptest": nil,
		}, 1},
		{"through another package of the lesson, named at each", map[string][]string{
			"internal/app": {"internal/orders"}, "internal/orders": {"harness/variants"}, "harness/variants": nil,
		}, 2},
		{"a cycle of packages outside the harness", map[string][]string{
			"internal/a": {"web"}, "web": {"internal/a"},
		}, 0},
	}
	for _, tc := range cases {
		if errs := harnessImports(tc.graph); len(errs) != tc.errs {
			t.Errorf("%s: %d errors %v, want %d", tc.name, len(errs), errs, tc.errs)
		}
	}
}

// harnessImports returns, for each package under internal/ whose imports
// reach one under harness/, the path that reaches it. graph maps each
// package of the module (its directory from the root) to the packages of
// the module it imports.
func harnessImports(graph map[string][]string) []error {
	underHarness := func(p string) bool { return p == "harness" || strings.HasPrefix(p, "harness/") }
	var errs []error
	pkgs := slices.Sorted(func(yield func(string) bool) {
		for p := range graph {
			if strings.HasPrefix(p, "internal/") && !yield(p) {
				return
			}
		}
	})
	for _, from := range pkgs {
		// Breadth first, so the path reported is a shortest one.
		via := map[string]string{from: ""}
		queue := []string{from}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			if underHarness(p) {
				chain := []string{p}
				for q := via[p]; q != ""; q = via[q] {
					chain = append(chain, q)
				}
				slices.Reverse(chain)
				errs = append(errs, fmt.Errorf("%s imports %s (%s): the lesson must build without the harness", from, p, strings.Join(chain, " → ")))
				break
			}
			for _, q := range graph[p] {
				if _, seen := via[q]; !seen {
					via[q] = p
					queue = append(queue, q)
				}
			}
		}
	}
	return errs
}

// moduleImports returns the module's path and, for each directory under
// root that holds non-test Go files, the packages of the module they
// import, as directories from root.
func moduleImports(root string) (string, map[string][]string, error) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", nil, err
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(mod)
	if m == nil {
		return "", nil, fmt.Errorf("go.mod names no module")
	}
	module := string(m[1])
	graph := map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || slices.Contains([]string{"vendor", "node_modules", "testdata"}, d.Name())) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		if _, ok := graph[dir]; !ok {
			graph[dir] = nil
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if to, ok := strings.CutPrefix(ip, module+"/"); ok && !slices.Contains(graph[dir], to) {
				graph[dir] = append(graph[dir], path.Clean(to))
			}
		}
		return nil
	})
	return module, graph, err
}
