package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/platform/layers"
)

// EnvUpdateDocs, set to 1, makes the ablation matrices rewrite their
// sections of docs/ABLATION.md instead of checking them (make ablation).
const EnvUpdateDocs = "SHOP_UPDATE_DOCS"

// Row is one line of a flow's ablation matrix: the layers taken off, and
// what the flow's race scenario must show with them off.
type Row struct {
	Layers layers.Set
	// Variant names a way of running the scenario other than the flow's
	// own naive code (for example "read-check-write"); "" for none.
	Variant string
	// Breaks says the invariant must break: the test fails if the
	// scenario finds no violation, so a matrix row can never pass for a
	// scenario that stopped racing.
	Breaks bool
	// Why says which layer holds the invariant, or why it breaks.
	Why string
}

// Outcome is what one run of a scenario found.
type Outcome struct {
	Violations int    // how many times the invariant broke
	Unit       string // what was counted: "orders charged twice"
	Of         int    // in a race of how many
	OfUnit     string // of what: "orders", "buyers"
}

// breakAttempts is how many runs a row expected to break gets.
const breakAttempts = 3

// Matrix runs scenario once for every row (a row expected to break up to
// breakAttempts times, until it does), as a subtest named after its
// layers, and asserts each row's expectation. It requires the rows every
// matrix has: all layers on, each single layer off, and all database
// layers off. Then it checks the flow's section of docs/ABLATION.md
// against what it saw (counts aside, which vary from run to run), or
// rewrites it when SHOP_UPDATE_DOCS=1.
func Matrix(t *testing.T, flow, scenario string, rows []Row, run func(t *testing.T, row Row) Outcome) {
	t.Helper()
	if testing.Short() {
		t.Skip("races real PostgreSQL and Redis")
	}
	requireStandardRows(t, rows)
	lines := make([]string, len(rows))
	for i, row := range rows {
		t.Run(rowName(row), func(t *testing.T) {
			out := run(t, row)
			// A race can miss its window on a loaded machine: a row that
			// must break gets up to breakAttempts runs to show it, each on
			// fresh data. A row that must hold gets one: any run that
			// breaks it fails.
			for attempt := 2; row.Breaks && out.Violations == 0 && attempt <= breakAttempts && !t.Failed(); attempt++ {
				t.Logf("with %s the invariant held in run %d (%s): running the race again", row.Layers, attempt-1, out)
				out = run(t, row)
			}
			switch {
			case row.Breaks && out.Violations == 0:
				t.Errorf("with %s the invariant held (%s): this row cannot show what the layers prevent", row.Layers, out)
			case !row.Breaks && out.Violations > 0:
				t.Errorf("with %s the invariant broke: %s", row.Layers, out)
			default:
				t.Logf("%s: %s", row.Layers, out)
			}
			lines[i] = tableLine(row, out)
		})
	}
	if t.Failed() || slices.Contains(lines, "") {
		return // a failed row, or rows left out by -run: nothing to compare
	}
	section := fmt.Sprintf("## %s\n\n%s\n\n| layers off | expected | seen | why |\n|---|---|---|---|\n%s\n",
		flow, scenario, strings.Join(lines, "\n"))
	checkSection(t, flow, section)
}

// requireStandardRows fails the test unless rows has all layers on, each
// single layer off, and all database layers off.
func requireStandardRows(t *testing.T, rows []Row) {
	t.Helper()
	want := []layers.Set{{}, layers.Off(layers.Database...)}
	for _, l := range layers.All {
		want = append(want, layers.Off(l))
	}
	for _, w := range want {
		found := false
		for _, r := range rows {
			found = found || (r.Layers == w && r.Variant == "")
		}
		if !found {
			t.Fatalf("the matrix has no row with %s", w)
		}
	}
}

func rowName(r Row) string {
	name := strings.ReplaceAll(r.Layers.String(), ", ", "+")
	if r.Variant != "" {
		name += "/" + r.Variant
	}
	return strings.ReplaceAll(name, " ", "_")
}

func tableLine(r Row, out Outcome) string {
	off := "none"
	if taken := r.Layers.Taken(); len(taken) > 0 {
		names := make([]string, len(taken))
		for i, l := range taken {
			names[i] = l.String()
		}
		off = strings.Join(names, ", ")
	}
	if r.Variant != "" {
		off += " (" + r.Variant + ")"
	}
	expected := "holds"
	if r.Breaks {
		expected = "**breaks**"
	}
	return fmt.Sprintf("| %s | %s | %s | %s |", off, expected, out, r.Why)
}

// String is "3 orders charged twice, of 20 orders".
func (o Outcome) String() string {
	return fmt.Sprintf("%d %s, of %d %s", o.Violations, o.Unit, o.Of, o.OfUnit)
}

// ablationDoc is docs/ABLATION.md, found from this source file so that
// any package's tests reach it.
func ablationDoc() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "ABLATION.md")
}

// digits are masked when a section is compared: counts vary per run.
var digits = regexp.MustCompile(`[0-9]+`)

// checkSection compares the flow's section of docs/ABLATION.md with
// section, or writes it there with SHOP_UPDATE_DOCS=1.
func checkSection(t *testing.T, flow, section string) {
	t.Helper()
	begin, end := "<!-- BEGIN "+flow+" -->\n", "<!-- END "+flow+" -->\n"
	path := ablationDoc()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	current := ""
	if i >= 0 && j > i {
		current = doc[i+len(begin) : j]
	}
	if os.Getenv(EnvUpdateDocs) == "1" {
		block := begin + section + end
		if i >= 0 && j > i {
			doc = doc[:i] + block + doc[j+len(end):]
		} else {
			doc = strings.TrimRight(doc, "\n") + "\n\n" + block
		}
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the %s section of %s", flow, path)
		return
	}
	if digits.ReplaceAllString(current, "#") != digits.ReplaceAllString(section, "#") {
		t.Errorf("docs/ABLATION.md's %s section is stale; run `make ablation`. It should read:\n%s", flow, section)
	}
}
