package bench

// `shop bench history -doc docs/STRATEGIES.md` follows the goal from run
// to run. Each run of `shop bench strategies -doc` replaces its flows'
// blocks, so the figures of the runs before survive only in the file's git
// history. This command measures nothing: it reads the goal lines of every
// version of the file (the one on disk first, as `make bench` has just
// written it), and writes one column per measured commit, the last
// historyRuns of them, into the history block. No figure in it is typed by
// hand: each is a goal line as a run of `shop bench strategies` wrote it,
// and its column names that run's commit and load.

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/shop-example/shop/harness/docblock"
)

// historyBlock is the generated block of docs/STRATEGIES.md holding the
// goal of every cell in each of the last runs ("Run to run").
const historyBlock = "strategies/history"

// historyRuns is how many measured commits the history block shows.
const historyRuns = 6

// goalLineRE reads a goal line of a strategies/<flow> block: the case,
// the layered rate, the fastest correct strategy and its rate (" through
// HTTP" since the baselines are served as the layered flow is; in process
// before), the ratio, the layered p99 and the verdict.
var goalLineRE = regexp.MustCompile(`^(hot|spread): layered ([0-9.]+)/s / (.+?)( through HTTP)? ([0-9.]+)/s = ([0-9.]+), layered p99 ([0-9.]+ ?[µm]?s): goal \(.*\) (NOT MET|MET)$`)

// goalRun is one measured commit's goal lines, as its blocks hold them.
type goalRun struct {
	commit  string             // the commit the run measured
	machine string             // its blocks' machine
	http    bool               // its baselines were served through HTTP
	cells   map[string]string  // "orders/hot" → "0.90, 52.1 ms" (bold when the goal was met)
	ratios  map[string]float64 // "orders/hot" → the layered flow ÷ the fastest correct strategy
	// code names the program the run measured (readHistory: the trees of
	// what builds it at the commit); runs of one code are repeats of one
	// measurement. Empty: the commit alone names it.
	code string
}

// maxDrop is how far a layered cell may fall between two measured
// versions of the code before the history block calls it a regression: a
// hot path that lost more than a fifth of its standing against the
// fastest correct strategy was changed without being measured.
//
// What is compared is the ratio each run measured (the layered flow ÷ the
// fastest strategy, side by side in one run), not the layered rate alone:
// from one day's box to another's every strategy moves together (likes
// hot, 7bece53 to 5e91965: the layered rate −34 %, the ratio 1.83 →
// 1.82). And runs of the same code are repeats, of which the best counts:
// two runs of one code ten minutes apart on a quiet box differed by more
// than a fifth in three cells (seats hot 0.75 → 0.59, seats spread
// 469 → 358/s, likes spread 0.78 → 0.58), which a run-to-run rule
// reported as regressions of code that had not changed.
const maxDrop = 0.20

// goalRuns reads the goal lines out of versions of the file, newest first,
// and returns one run per measured commit, oldest first. A flow whose
// block an older version holds at a commit already seen is not read again:
// the newest version of a block is the one the command last wrote.
func goalRuns(versions []string) []goalRun {
	var runs []*goalRun
	byCommit := map[string]*goalRun{}
	for _, doc := range versions {
		blocks, err := docblock.Parse(doc)
		if err != nil {
			continue // a version with a broken marker tells nothing
		}
		for _, b := range blocks {
			flow, ok := strings.CutPrefix(b.Name, "strategies/")
			if !ok || !slices.ContainsFunc(strategyFlows(), func(f flowSpec) bool { return f.name == flow }) {
				continue
			}
			run := byCommit[b.Commit]
			if run == nil {
				run = &goalRun{commit: b.Commit, machine: b.Machine, cells: map[string]string{}, ratios: map[string]float64{}}
				byCommit[b.Commit] = run
				runs = append(runs, run)
			}
			for _, line := range strings.Split(b.Body, "\n") {
				m := goalLineRE.FindStringSubmatch(strings.TrimSpace(line))
				if m == nil {
					continue
				}
				cell := flow + "/" + m[1]
				if _, seen := run.cells[cell]; seen {
					continue
				}
				v := m[6] + ", " + m[7]
				if m[8] == "MET" {
					v = "**" + v + "**"
				}
				run.cells[cell] = v
				if ratio, err := strconv.ParseFloat(m[6], 64); err == nil {
					run.ratios[cell] = ratio
				}
				run.http = run.http || m[4] != ""
			}
		}
	}
	out := make([]goalRun, 0, len(runs))
	for i := len(runs) - 1; i >= 0; i-- {
		if len(runs[i].cells) > 0 {
			out = append(out, *runs[i])
		}
	}
	return out
}

// goalCells are the rows of the goals and history blocks, "flow/case":
// those of the flows the shoot-out runs by default.
func goalCells() []string {
	var names []string
	for _, f := range strategyFlows() {
		if slices.Contains(defaultStrategyFlows, f.name) {
			names = append(names, f.name+"/"+hot, f.name+"/"+spread)
		}
	}
	return names
}

// historyTable is the history block's body: a row per cell, a column per
// run (the last historyRuns), each the layered flow against the fastest
// correct strategy of that run and the layered p99.
func historyTable(runs []goalRun, dates map[string]string) string {
	if len(runs) > historyRuns {
		runs = runs[len(runs)-historyRuns:]
	}
	var b strings.Builder
	fmt.Fprint(&b, "| cell |")
	for _, r := range runs {
		basis := "in process"
		if r.http {
			basis = "through HTTP"
		}
		load := "load ?"
		if _, l, ok := (docblock.Block{Machine: r.machine}).StartLoad(); ok {
			load = fmt.Sprintf("load %.2f", l)
		}
		if strings.Contains(r.machine, docblock.LoadedMarker) {
			load += ", " + docblock.LoadedMarker
		}
		date := dates[r.commit]
		if date != "" {
			date += ", "
		}
		fmt.Fprintf(&b, " %s (%s%s, %s) |", shortCommit(r.commit), date, basis, load)
	}
	fmt.Fprint(&b, "\n|---|")
	for range runs {
		fmt.Fprint(&b, "---:|")
	}
	fmt.Fprintln(&b)
	for _, cell := range goalCells() {
		fmt.Fprintf(&b, "| %s |", cell)
		for _, r := range runs {
			v := r.cells[cell]
			if v == "" {
				v = "—"
			}
			fmt.Fprintf(&b, " %s |", v)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintf(&b, "\nEach cell: the layered flow ÷ the fastest strategy with no anomaly in that run, and the layered p99; bold where the goal (ratio >= %.1f, p99 < %s) was met. "+
		"Before the baselines were served through HTTP, the ratio was taken against them in process.\n", goalStrategyRatio, goalP99)
	fmt.Fprintln(&b)
	drops := layeredDrops(runs)
	for _, d := range drops {
		fmt.Fprintln(&b, d)
	}
	if len(drops) == 0 {
		fmt.Fprintf(&b, "No layered cell's ratio fell by more than %.0f %% from one version of the code to the next (the best of each version's runs through HTTP on a quiet box).\n", maxDrop*100)
	}
	return b.String()
}

// layeredDrops are the failed lines of the history: each layered cell
// whose ratio, the best of a code's runs, fell by more than maxDrop from
// one version of the code to the next, where the runs were measured
// through HTTP on a box not marked loaded (the runs whose figures
// compare).
func layeredDrops(runs []goalRun) []string {
	type version struct {
		commits []string
		best    map[string]float64
	}
	var versions []*version
	lastCode := ""
	for _, r := range runs {
		if !r.http || strings.Contains(r.machine, docblock.LoadedMarker) {
			continue
		}
		code := r.code
		if code == "" {
			code = r.commit
		}
		if len(versions) == 0 || code != lastCode {
			versions = append(versions, &version{best: map[string]float64{}})
			lastCode = code
		}
		v := versions[len(versions)-1]
		v.commits = append(v.commits, shortCommit(r.commit))
		for cell, ratio := range r.ratios {
			v.best[cell] = max(v.best[cell], ratio)
		}
	}
	var out []string
	for i := 1; i < len(versions); i++ {
		prev, cur := versions[i-1], versions[i]
		for _, cell := range goalCells() {
			before, after := prev.best[cell], cur.best[cell]
			if before > 0 && after > 0 && after < before*(1-maxDrop) {
				out = append(out, fmt.Sprintf("FAILED: %s: the layered flow ÷ the fastest strategy fell from %.2f at %s to %.2f at %s, %.0f %% (more than %.0f %%)",
					cell, before, runsOf(prev.commits), after, runsOf(cur.commits), (after/before-1)*100, maxDrop*100))
			}
		}
	}
	return out
}

// runsOf names a code's runs: "abc1234", or "the best of abc1234, def5678".
func runsOf(commits []string) string {
	if len(commits) == 1 {
		return commits[0]
	}
	return "the best of " + strings.Join(commits, ", ")
}

func shortCommit(c string) string {
	if len(c) > 7 {
		return c[:7]
	}
	return c
}

// benchHistory is `shop bench history -doc FILE`.
func benchHistory(args []string) error {
	fs := flag.NewFlagSet("shop bench history", flag.ContinueOnError)
	path := fs.String("doc", "", "the Markdown file whose strategies blocks to follow through its git history, and to write the history block into (docs/STRATEGIES.md)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return ErrUsage
	}
	if *path == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: shop bench history -doc FILE", ErrUsage)
	}
	// The commit the block is written at, refused on a tree whose code is
	// not committed, as a measuring bench's.
	d, err := newDocTarget(*path, append([]string{"history"}, args...), docblock.Box{})
	if err != nil {
		return err
	}
	b, err := readHistory(*path)
	if err != nil {
		return err
	}
	b.Command, b.Commit = d.command, d.commit
	b.Machine = "no machine: collected from the runs of each column, each measured on its own"
	return docblock.Update(*path, b)
}

// measuredCode names what a run at commit measured: the git trees of
// what builds the shop and its bench (the Go module and its packages,
// the migrations), so that runs at commits that changed only documents
// are repeats of one measurement. Empty when git cannot tell.
func measuredCode(dir, commit string) string {
	var revs []string
	for _, p := range []string{"go.mod", "go.sum", "cmd", "internal", "harness", "migrations"} {
		revs = append(revs, commit+":"+p)
	}
	out, err := exec.Command("git", append([]string{"-C", dir, "rev-parse"}, revs...)...).Output()
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

// readHistory is the history block of the file at path, read from it as
// it is and from every version of it in git.
func readHistory(path string) (docblock.Block, error) {
	dir, file := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	current, err := os.ReadFile(path)
	if err != nil {
		return docblock.Block{}, err
	}
	versions := []string{string(current)}
	log, err := exec.Command("git", "-C", dir, "log", "--format=%H", "--", file).Output()
	if err != nil {
		return docblock.Block{}, fmt.Errorf("history of %s: git log: %w", path, err)
	}
	for _, c := range strings.Fields(string(log)) {
		v, err := exec.Command("git", "-C", dir, "show", c+":./"+file).Output()
		if err != nil {
			continue // the file was renamed or deleted at c
		}
		versions = append(versions, string(v))
	}
	runs := goalRuns(versions)
	dates := map[string]string{}
	for i, r := range runs {
		if out, err := exec.Command("git", "-C", dir, "show", "-s", "--format=%cs", r.commit).Output(); err == nil {
			dates[r.commit] = strings.TrimSpace(string(out))
		}
		runs[i].code = measuredCode(dir, r.commit)
	}
	return docblock.Block{Name: historyBlock, Rows: goalCells(), Body: historyTable(runs, dates)}, nil
}
