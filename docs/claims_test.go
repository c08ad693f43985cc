package docs_test

// Every test a document names as its proof must exist.

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// documents are the files whose claims name their tests: README.md,
// docs/*.md and openapi.yaml.
func documents(t *testing.T) []string {
	t.Helper()
	return append(markdownFiles(t), "openapi.yaml")
}

var (
	// A test named in a document: TestX or TestX/Sub, anywhere in the text.
	namedTest = regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)
	// A test declared in a _test.go file.
	declaredTest = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9_]*)\(t \*testing\.T\)`)
)

// TestClaims_NameExistingTests fails when a document says a claim is shown
// by a test that does not exist (renamed, deleted, never written): a claim
// whose proof is gone is only a sentence.
func TestClaims_NameExistingTests(t *testing.T) {
	declared := declaredTests(t, "..")
	if len(declared) < 50 {
		t.Fatalf("found only %d tests in the repository: the scan is broken", len(declared))
	}
	named := 0
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, name := range namedTest.FindAllString(line, -1) {
				named++
				if !declared[name] {
					t.Errorf("%s:%d names %s, which no _test.go file declares", doc, i+1, name)
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("the documents name no tests: the scan is broken")
	}
}

// declaredTests returns the names of every test function in the
// repository rooted at root.
func declaredTests(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains([]string{".git", ".images", "vendor", "node_modules"}, d.Name()) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declaredTest.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
