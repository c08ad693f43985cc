package docs_test

// DESIGN.md §4 is the one list of the repository's directories. A package
// added without its line, a line left behind by a removed package, or a
// package listed twice fails here.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
