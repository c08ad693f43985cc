package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/docblock"
)

// historyDoc is a STRATEGIES.md holding the orders block of a run at
// commit, whose body ends in the goal lines.
func historyDoc(t *testing.T, commit, machine string, goalLines ...string) string {
	t.Helper()
	text, err := docblock.Block{Name: "strategies/orders", Command: "bin/shop bench strategies -doc docs/STRATEGIES.md", Commit: commit, Machine: machine,
		Rows: []string{"hot/layered"}, Body: "| table |\n\n```text\n" + strings.Join(goalLines, "\n") + "\n```"}.Render()
	if err != nil {
		t.Fatal(err)
	}
	return "# Strategies\n\n" + text
}

func TestGoalRuns_OneColumnPerMeasuredCommit(t *testing.T) {
	const (
		inProcess = "hot: layered 952/s / advisory 1232/s = 0.77, layered p99 68.6 ms: goal (ratio >= 0.7, p99 < 100ms) MET"
		overHTTP  = "spread: layered 1083/s / conditional through HTTP 1198/s = 0.90, layered p99 52.1 ms: goal (ratio >= 0.7, p99 < 100ms) MET"
		missed    = "hot: layered 293/s / unique only through HTTP 211/s = 1.39, layered p99 275.7 ms: goal (ratio >= 0.7, p99 < 100ms) NOT MET"
		stretch   = "spread stretch: layered 1083/s / conditional's SQL floor 1741/s = 0.62: stretch (ratio >= 0.5) MET"
	)
	// Newest first, as git log lists them: the file as just written, then
	// two versions holding the same older run, then one without blocks.
	versions := []string{
		historyDoc(t, "bbbbbbbbbbbb", "2 cores, linux/amd64, load 0.80 at the start", missed, overHTTP, stretch),
		historyDoc(t, "aaaaaaaaaaaa", "2 cores, linux/amd64, load 1.50 at the start", inProcess),
		historyDoc(t, "aaaaaaaaaaaa", "2 cores, linux/amd64, load 1.50 at the start", "hot: layered 1/s / advisory 2/s = 0.50, layered p99 1.0 ms: goal (ratio >= 0.7, p99 < 100ms) NOT MET"),
		"# Strategies\n\nno blocks yet\n",
	}
	runs := goalRuns(versions)
	if len(runs) != 2 || runs[0].commit != "aaaaaaaaaaaa" || runs[1].commit != "bbbbbbbbbbbb" {
		t.Fatalf("runs = %+v, want aaaa then bbbb", runs)
	}
	if got := runs[0].cells["orders/hot"]; got != "**0.77, 68.6 ms**" || runs[0].http {
		t.Errorf("older run: orders/hot = %q (http %v), want the newest version's line, met, in process", got, runs[0].http)
	}
	if got := runs[1].cells["orders/hot"]; got != "1.39, 275.7 ms" {
		t.Errorf("newer run: orders/hot = %q, want the missed goal unbolded", got)
	}
	if got := runs[1].cells["orders/spread"]; got != "**0.90, 52.1 ms**" || !runs[1].http {
		t.Errorf("newer run: orders/spread = %q (http %v), want met, through HTTP", got, runs[1].http)
	}

	table := historyTable(runs, map[string]string{"bbbbbbbbbbbb": "2026-12-02"})
	for _, want := range []string{
		"| cell | aaaaaaa (in process, load 1.50) | bbbbbbb (2026-12-02, through HTTP, load 0.80) |",
		"| orders/hot | **0.77, 68.6 ms** | 1.39, 275.7 ms |",
		"| orders/spread | — | **0.90, 52.1 ms** |",
		"| likes/spread | — | — |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("history table lacks %q:\n%s", want, table)
		}
	}
}

func TestHistoryTable_KeepsTheLastRuns(t *testing.T) {
	var runs []goalRun
	for i := range historyRuns + 2 {
		runs = append(runs, goalRun{commit: strings.Repeat(string(rune('a'+i)), 12), cells: map[string]string{"orders/hot": "1.00, 1 ms"}})
	}
	table := historyTable(runs, nil)
	if strings.Contains(table, "aaaaaaa") || strings.Contains(table, "bbbbbbb") || !strings.Contains(table, "ccccccc") || !strings.Contains(table, strings.Repeat(string(rune('a'+historyRuns+1)), 7)) {
		t.Errorf("want the last %d runs only:\n%s", historyRuns, table)
	}
}

// The history of a run: the file as the bench has just written it, and
// what git holds of the one before.
func TestDocTargetHistory_ReadsTheFileAndItsGitHistory(t *testing.T) {
	dir := t.TempDir()
	gitIn := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	path := filepath.Join(dir, "STRATEGIES.md")
	gitIn("init", "-q")
	before := "hot: layered 1/s / advisory 2/s = 0.50, layered p99 1.0 ms: goal (ratio >= 0.7, p99 < 100ms) NOT MET"
	if err := os.WriteFile(path, []byte(historyDoc(t, "aaaaaaaaaaaa", "2 cores, load 1.00 at the start", before)), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn("add", ".")
	gitIn("commit", "-q", "-m", "first run")
	after := "hot: layered 3/s / advisory through HTTP 2/s = 1.50, layered p99 2.0 ms: goal (ratio >= 0.7, p99 < 100ms) MET"
	if err := os.WriteFile(path, []byte(historyDoc(t, "bbbbbbbbbbbb", "2 cores, load 0.50 at the start", after)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := readHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != historyBlock || !slices.Equal(b.Rows, goalCells()) {
		t.Errorf("block %s rows %q", b.Name, b.Rows)
	}
	if !strings.Contains(b.Body, "| orders/hot | 0.50, 1.0 ms | **1.50, 2.0 ms** |") {
		t.Errorf("want the committed run, then the one just written:\n%s", b.Body)
	}
}

// The history reads the goal lines goalLine writes: a change to either
// format that the other does not follow would drop new runs from the
// history block without a word.
func TestGoalLineRE_ReadsGoalLine(t *testing.T) {
	run := func(ops int, p99 time.Duration) cellRun {
		return cellRun{result: result{window: time.Second, orders: ops, p99: p99}}
	}
	for _, tc := range []struct {
		layered, best int
		p99           time.Duration
		want          string
	}{
		{layered: 900, best: 1000, p99: 52100 * time.Microsecond, want: "**0.90, 52.1 ms**"},
		{layered: 300, best: 1000, p99: 275700 * time.Microsecond, want: "0.30, 275.7 ms"},
	} {
		rows := []cellResult{
			{flow: "orders", strategy: "layered", shape: spread, http: []cellRun{run(tc.layered, tc.p99)}},
			{flow: "orders", strategy: "unique only", shape: spread, http: []cellRun{run(tc.best, time.Millisecond)}},
		}
		line := goalLine(rows, spread)
		runs := goalRuns([]string{historyDoc(t, "aaaaaaaaaaaa", "2 cores, load 1.00 at the start", line)})
		if len(runs) != 1 || runs[0].cells["orders/spread"] != tc.want || !runs[0].http {
			t.Errorf("goalLine wrote %q; the history read %+v, want orders/spread %q through HTTP", line, runs, tc.want)
		}
	}
}

// TestHistory_FailsADrop: a layered cell whose ratio to the fastest
// strategy fell by more than a fifth from one version of the code to the
// next is a failed line of the history block (and docs/docs_test.go fails
// on it); a drop of a fifth or less, a run on a loaded box, one measured
// in process, a slower box (every strategy slower, the ratio kept) or a
// worse repeat of the same code is no regression and shows none.
func TestHistory_FailsADrop(t *testing.T) {
	const quiet, loaded = "2 cores, linux/amd64, load 0.50 at the start", "2 cores, linux/amd64, load 6.00 at the start, " + docblock.LoadedMarker
	line := func(rate int, ratio string) string {
		return "spread: layered " + strconv.Itoa(rate) + "/s / row lock through HTTP 1330/s = " + ratio + ", layered p99 43.5 ms: goal (ratio >= 0.7, p99 < 100ms) MET"
	}
	for _, tc := range []struct {
		name     string
		versions []string          // newest first
		codes    map[string]string // commit → the code it measured; none: each commit its own
		want     string            // a fragment of the failed line; "" for none
	}{
		{"DropOfAThird", []string{
			historyDoc(t, "bbbbbbbbbbbb", quiet, line(554, "0.54")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(813, "0.80")),
		}, nil, "FAILED: orders/spread: the layered flow ÷ the fastest strategy fell from 0.80 at aaaaaaa to 0.54 at bbbbbbb, -32 %"},
		{"DropOfAFifth", []string{
			historyDoc(t, "bbbbbbbbbbbb", quiet, line(651, "0.65")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(813, "0.80")),
		}, nil, ""},
		{"ASlowerBoxIsNoDrop", []string{
			historyDoc(t, "bbbbbbbbbbbb", quiet, line(2224, "0.80")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(3391, "0.80")),
		}, nil, ""},
		{"LoadedBoxIsNoComparison", []string{
			historyDoc(t, "cccccccccccc", quiet, line(800, "0.79")),
			historyDoc(t, "bbbbbbbbbbbb", loaded, line(300, "0.30")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(813, "0.80")),
		}, nil, ""},
		{"AgainstTheLastComparableRun", []string{
			historyDoc(t, "cccccccccccc", quiet, line(500, "0.50")),
			historyDoc(t, "bbbbbbbbbbbb", loaded, line(900, "0.90")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(813, "0.80")),
		}, nil, "from 0.80 at aaaaaaa to 0.50 at ccccccc"},
		{"AWorseRepeatOfTheSameCode", []string{
			historyDoc(t, "cccccccccccc", quiet, line(550, "0.55")),
			historyDoc(t, "bbbbbbbbbbbb", quiet, line(750, "0.75")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(813, "0.80")),
		}, map[string]string{"aaaaaaaaaaaa": "x", "bbbbbbbbbbbb": "y", "cccccccccccc": "y"}, ""},
		{"EveryRepeatOfTheNewCodeDropped", []string{
			historyDoc(t, "cccccccccccc", quiet, line(550, "0.55")),
			historyDoc(t, "bbbbbbbbbbbb", quiet, line(500, "0.50")),
			historyDoc(t, "aaaaaaaaaaaa", quiet, line(813, "0.80")),
		}, map[string]string{"aaaaaaaaaaaa": "x", "bbbbbbbbbbbb": "y", "cccccccccccc": "y"}, "from 0.80 at aaaaaaa to 0.55 at the best of bbbbbbb, ccccccc, -31 %"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := goalRuns(tc.versions)
			for i := range runs {
				runs[i].code = tc.codes[runs[i].commit]
			}
			table := historyTable(runs, nil)
			failed := strings.Contains(table, "FAILED:")
			switch {
			case tc.want == "" && failed:
				t.Errorf("a failed line where there is no drop to compare:\n%s", table)
			case tc.want != "" && !strings.Contains(table, tc.want):
				t.Errorf("want the failed line %q:\n%s", tc.want, table)
			}
		})
	}
}
