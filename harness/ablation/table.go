package ablation

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/shop-example/shop/harness/docblock"
)

// Scenario is what a matrix's race does and counts, as its test states
// it from its sizes.
type Scenario struct {
	Text    string // what races, and the invariant
	Counted string // what one violation is: "oversold units or duplicate orders, of 120 buyers"
	// Progress is the work a run counts, ProgressWant at least how much of
	// it a row that holds must show: a row where every request was
	// refused holds nothing.
	Progress     string
	ProgressWant int
}

// Seen is what a row's runs found.
type Seen struct {
	Runs     []int // violations each run found, in order; the last is the row's
	Progress int   // the work the last run did
}

// Judge reports whether seen is what row must show: one run for a row
// that holds, up to Attempts for one that breaks, each run before the last
// finding nothing (which is why another ran); the last run's count in the
// row's band; and for a row that holds, the work of the scenario done.
func (s Scenario) Judge(row Row, seen Seen) error {
	n := len(seen.Runs)
	switch {
	case n == 0:
		return fmt.Errorf("row %q: no run", row.Name())
	case !row.Breaks && n > 1, n > Attempts:
		return fmt.Errorf("row %q: %d runs, want at most %d", row.Name(), n, map[bool]int{false: 1, true: Attempts}[row.Breaks])
	case slices.ContainsFunc(seen.Runs[:n-1], func(v int) bool { return v != 0 }):
		return fmt.Errorf("row %q: runs %v: a run before the last found a violation, so no further run was due", row.Name(), seen.Runs)
	case !row.Expected().Contains(seen.Runs[n-1]):
		return fmt.Errorf("row %q: %d %s, outside its band %s", row.Name(), seen.Runs[n-1], s.Counted, row.Expected())
	case !row.Breaks && seen.Progress < s.ProgressWant:
		return fmt.Errorf("row %q: %d %s, want at least %d: a row that holds must show the work done", row.Name(), seen.Progress, s.Progress, s.ProgressWant)
	}
	return nil
}

const tableHead = "| layers off | expected | violations seen, by run | progress | why |\n|---|---|---|---|---|\n"

// Body is the flow's table and what it counts, as docs/ABLATION.md shows
// it, seen[i] being what row i's runs found.
func (f Flow) Body(s Scenario, seen []Seen) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nCounted: %s. Progress: %s; a row that holds must show at least %d. A row that must break gets up to %d runs, each on fresh data, until one breaks; every run is shown.\n\n",
		s.Text, s.Counted, s.Progress, s.ProgressWant, Attempts)
	b.WriteString(tableHead)
	for i, r := range f.Rows {
		expected := "holds: " + r.Expected().String()
		if r.Breaks {
			expected = "**breaks**: " + r.Expected().String()
		}
		runs := make([]string, len(seen[i].Runs))
		for j, v := range seen[i].Runs {
			runs[j] = strconv.Itoa(v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s |\n", r.Name(), expected, strings.Join(runs, ", "), seen[i].Progress, r.Why)
	}
	var absent []string
	for _, l := range slices.Sorted(maps.Keys(f.Absent)) {
		absent = append(absent, fmt.Sprintf("- %s: %s.", l, f.Absent[l]))
	}
	if len(absent) > 0 {
		fmt.Fprintf(&b, "\nLayers this flow does not have, so no row takes them off:\n\n%s\n", strings.Join(absent, "\n"))
	}
	return b.String()
}

// Check compares the flow's block of doc (docs/ABLATION.md) with what the
// code runs now: the rows by name, and the table's every word. Its counts
// are not compared with a new run's (they vary from run to run) but
// judged: each must be what its row states (Scenario.Judge).
func (f Flow) Check(doc string, s Scenario) error {
	blocks, err := docblock.Parse(doc)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(blocks, func(b docblock.Block) bool { return b.Name == f.Block() })
	if i < 0 {
		return fmt.Errorf("no block %s", f.Block())
	}
	b := blocks[i]
	if b.Command != Command {
		return fmt.Errorf("block %s names the command %q, want %q", b.Name, b.Command, Command)
	}
	if !slices.Equal(b.Rows, f.RowNames()) {
		return fmt.Errorf("block %s has the rows %q, the code runs %q", b.Name, b.Rows, f.RowNames())
	}
	seen, err := f.figures(b.Body)
	if err != nil {
		return fmt.Errorf("block %s: %w", b.Name, err)
	}
	for j, r := range f.Rows {
		if err := s.Judge(r, seen[j]); err != nil {
			return fmt.Errorf("block %s: %w", b.Name, err)
		}
	}
	if want := strings.TrimRight(f.Body(s, seen), "\n"); b.Body != want {
		return fmt.Errorf("block %s differs from what the code would write with its counts:\n%s", b.Name, want)
	}
	return nil
}

// figures reads the counts of each row of the table in body.
func (f Flow) figures(body string) ([]Seen, error) {
	_, table, ok := strings.Cut(body, tableHead)
	if !ok {
		return nil, fmt.Errorf("no table headed %q", strings.SplitN(tableHead, "\n", 2)[0])
	}
	lines := strings.Split(table, "\n")
	if len(lines) < len(f.Rows) {
		return nil, fmt.Errorf("%d table lines, want %d", len(lines), len(f.Rows))
	}
	seen := make([]Seen, len(f.Rows))
	for i := range f.Rows {
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(lines[i], "| "), " |"), " | ")
		if len(cells) < 5 {
			return nil, fmt.Errorf("table line %q: want 5 cells", lines[i])
		}
		for _, v := range strings.Split(cells[2], ", ") {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("row %q: runs %q: %w", cells[0], cells[2], err)
			}
			seen[i].Runs = append(seen[i].Runs, n)
		}
		n, err := strconv.Atoi(cells[3])
		if err != nil {
			return nil, fmt.Errorf("row %q: progress %q: %w", cells[0], cells[3], err)
		}
		seen[i].Progress = n
	}
	return seen, nil
}
