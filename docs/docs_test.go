package docs_test

// The documents' links, and their generated blocks (package docblock):
// a figure is an output of the command that measured it, so a table that
// no longer matches the code, or that went missing with its section,
// fails here. Package docs_test, not docs: the benches that name their
// rows import the service, which imports package docs.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/bench"
	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/harness/faults"
)

// blockRows maps the prefix of a generated block's name to what returns
// the rows the code would run now for that block, without running it. A
// block whose name no prefix here covers fails the test: no table of
// figures goes unchecked.
var blockRows = map[string]func(name string) ([]string, error){
	"benchmarks/": bench.BlockRows, // docs/BENCHMARKS.md, make bench
	"strategies/": bench.BlockRows, // docs/STRATEGIES.md, make bench
	"faults/":     faultRows,       // docs/RELIABILITY.md, make faults
	"ablation/":   ablationRows,    // docs/ABLATION.md, make ablation
}

func ablationRows(name string) ([]string, error) {
	rows, ok := ablation.Rows()[name]
	if !ok {
		return nil, fmt.Errorf("no ablation matrix writes %s", name)
	}
	return rows, nil
}

func faultRows(name string) ([]string, error) {
	switch name {
	case faults.Block:
		return faults.Rows(), nil
	case faults.FailoverBlock:
		return faults.Failovers(), nil
	}
	return nil, fmt.Errorf("the fault suite writes only %s and %s", faults.Block, faults.FailoverBlock)
}

// requiredBlocks are the generated blocks each file must hold: deleting
// one, or the section around it, fails the test.
var requiredBlocks = map[string][]string{
	"BENCHMARKS.md":  {"benchmarks/orders", "benchmarks/payments", "benchmarks/likes", "benchmarks/seats", "benchmarks/events"},
	"STRATEGIES.md":  {"strategies/orders", "strategies/payments", "strategies/seats", "strategies/likes", "strategies/outside", "strategies/goals", "strategies/history"},
	"RELIABILITY.md": {faults.Block, faults.FailoverBlock},
	"ABLATION.md":    ablationBlocks(),
}

func ablationBlocks() []string {
	var names []string
	for _, f := range ablation.Flows() {
		names = append(names, f.Block())
	}
	return names
}

// requiredSections are headings (as anchors) that hold prose other
// documents rely on, beyond what a table of contents links to.
var requiredSections = map[string][]string{
	"STRATEGIES.md": {"results", "run-to-run", "verdicts", "the-performance-goal", "why-the-profile", "dynamodbs-patterns-in-postgresql", "what-is-not-measured", "from-outside-two-replicas"},
}

// markdownFiles are README.md and docs/*.md, as paths from this directory.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	if len(files) < 5 {
		t.Fatalf("found only %q: the scan is broken", files)
	}
	return files
}

// TestDocs_LinksResolve fails on a relative link whose file does not
// exist, or whose #anchor names no heading of its Markdown file, in
// README.md and docs/*.md.
func TestDocs_LinksResolve(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	checked := 0
	for _, file := range markdownFiles(t) {
		for _, l := range links(t, file) {
			if scheme.MatchString(l.target) {
				continue // http:, mailto:, …
			}
			checked++
			path, frag, _ := strings.Cut(l.target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s:%d: %s: no such file", file, l.line, l.target)
				continue
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchorsOf[dest] == nil {
				anchorsOf[dest] = anchors(t, dest)
			}
			if !anchorsOf[dest][strings.ToLower(frag)] {
				t.Errorf("%s:%d: %s: no such heading", file, l.line, l.target)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the scan is broken")
	}
}

// TestDocs_RequiredSections fails when a heading other documents rely on
// is gone.
func TestDocs_RequiredSections(t *testing.T) {
	for file, want := range requiredSections {
		have := anchors(t, file)
		for _, a := range want {
			if !have[a] {
				t.Errorf("%s has no section #%s", file, a)
			}
		}
	}
}

// TestDocs_GeneratedBlocks fails when a generated block is missing from a
// file that must hold it, was measured at a commit that is not an ancestor
// of HEAD, or has rows other than those the code would run now.
func TestDocs_GeneratedBlocks(t *testing.T) {
	ancestor := map[string]error{}
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := docblock.Parse(string(b))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		have := map[string]bool{}
		for _, blk := range blocks {
			have[blk.Name] = true
			if _, seen := ancestor[blk.Commit]; !seen {
				ancestor[blk.Commit] = isAncestor(blk.Commit)
			}
			if err := ancestor[blk.Commit]; err != nil {
				t.Errorf("%s: block %s was measured at commit %s, which is not an ancestor of HEAD: %v", file, blk.Name, blk.Commit, err)
			}
			want, err := rowsFor(blk.Name)
			if err != nil {
				t.Errorf("%s: block %s: %v", file, blk.Name, err)
				continue
			}
			if !slices.Equal(blk.Rows, want) {
				t.Errorf("%s: block %s has rows %q; the code runs %q now: run `%s` again", file, blk.Name, blk.Rows, want, blk.Command)
			}
		}
		for _, name := range requiredBlocks[filepath.Base(file)] {
			if !have[name] {
				t.Errorf("%s has no generated block %s", file, name)
			}
		}
	}
}

// TestDocs_NoRegression fails when a generated block says a measured hot
// path fell: the bench's history writes a FAILED line for each layered
// cell whose throughput dropped by more than a fifth from one run to the
// next (harness/bench layeredDrops). A change that cost a flow that much
// does not land until it is found and undone, or the drop explained by a
// new run.
func TestDocs_NoRegression(t *testing.T) {
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := docblock.Parse(string(b))
		if err != nil {
			continue // TestDocs_GeneratedBlocks reports it
		}
		for _, blk := range blocks {
			for _, line := range strings.Split(blk.Body, "\n") {
				if strings.HasPrefix(line, "FAILED:") {
					t.Errorf("%s: block %s: %s", file, blk.Name, line)
				}
			}
		}
	}
}

// TestDocs_MeasuredOnQuietBoxes lists the generated blocks measured on a
// loaded box (docblock.Block.Loaded: the LOADED BOX marker that `shop
// bench … -doc -loaded` writes, or an older block's load above its
// cores). It skips, naming them, rather than failing: such a block says
// what it is in its own provenance line, so no reader takes it for a quiet
// box's figures, and the shared two-core boxes the code is written on are
// never quiet, so a failure would leave a change that adds or renames a
// row no way to pass but to wait for a quiet box. What keeps the published
// figures quiet is `make bench`, which measures nothing on a loaded box.
func TestDocs_MeasuredOnQuietBoxes(t *testing.T) {
	var loaded []string
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := docblock.Parse(string(b))
		if err != nil {
			continue // TestDocs_GeneratedBlocks reports it
		}
		for _, blk := range blocks {
			if blk.Loaded() {
				loaded = append(loaded, fmt.Sprintf("%s: %s (%s)", file, blk.Name, blk.Machine))
			}
		}
	}
	if len(loaded) > 0 {
		t.Skipf("%d generated blocks were measured on a loaded box; `make bench` (or `make ablation`, `make faults`) on a quiet one replaces them:\n%s",
			len(loaded), strings.Join(loaded, "\n"))
	}
}

// rowsFor returns the rows the code would run now for the block name.
func rowsFor(name string) ([]string, error) {
	for prefix, rows := range blockRows {
		if strings.HasPrefix(name, prefix) {
			return rows(name)
		}
	}
	return nil, errors.New("no entry of blockRows (docs/docs_test.go) checks its rows")
}

// isAncestor says why commit is not an ancestor of HEAD, or nil.
func isAncestor(commit string) error {
	out, err := exec.Command("git", "merge-base", "--is-ancestor", commit, "HEAD").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return errors.New("git merge-base --is-ancestor says no")
	}
	return errors.New(strings.TrimSpace(string(out)) + " (" + err.Error() + ")")
}

// The Markdown that links and headings are read from, as GitHub reads it.
var (
	linkRE    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fenceRE   = regexp.MustCompile("^\\s*(```|~~~)")
	codeRE    = regexp.MustCompile("`([^`]*)`")
	anchorRE  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	inlineRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	tagRE     = regexp.MustCompile(`<[^>]+>`)
	notSlugRE = regexp.MustCompile(`[^\p{L}\p{M}\p{N}_\- ]`)
	scheme    = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

type link struct {
	line   int
	target string
}

// numbered is a line of a file and its number, from 1.
type numbered struct {
	n    int
	text string
}

// proseLines returns the lines of file outside code fences.
func proseLines(t *testing.T, file string) []numbered {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []numbered
	fenced := false
	for i, line := range strings.Split(string(b), "\n") {
		if fenceRE.MatchString(line) {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, numbered{i + 1, line})
		}
	}
	return out
}

// links returns the links and images of file, outside code.
func links(t *testing.T, file string) []link {
	t.Helper()
	var out []link
	for _, l := range proseLines(t, file) {
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(l.text, ""), -1) {
			out = append(out, link{line: l.n, target: m[1]})
		}
	}
	return out
}

// anchors returns the anchors of file's headings as GitHub makes them
// (slug; a repeated slug gets -1, -2, …), and those of <a name|id>.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(t, file) {
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			for _, a := range anchorRE.FindAllStringSubmatch(l.text, -1) {
				out[a[1]] = true
			}
			continue
		}
		s := slug(m[2])
		if k := seen[s]; k > 0 {
			out[s+"-"+strconv.Itoa(k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's anchor of a heading's text: code and links reduced to
// their text, tags dropped, lower case, punctuation but - and _ removed,
// spaces to -.
func slug(text string) string {
	text = codeRE.ReplaceAllString(text, "$1")
	text = inlineRE.ReplaceAllString(text, "$1")
	text = tagRE.ReplaceAllString(text, "")
	text = strings.ToLower(strings.TrimSpace(text))
	text = notSlugRE.ReplaceAllString(text, "")
	return strings.ReplaceAll(text, " ", "-")
}
