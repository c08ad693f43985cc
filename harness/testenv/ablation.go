package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/internal/platform/layers"
)

// EnvUpdateDocs, set to 1, makes the ablation matrices rewrite their
// blocks of docs/ABLATION.md instead of checking them (make ablation).
const EnvUpdateDocs = "SHOP_UPDATE_DOCS"

// Outcome is what one run of a scenario found.
type Outcome struct {
	Violations int // how many times the invariant broke (Scenario.Counted)
	Progress   int // the work done (Scenario.Progress)
}

// Matrix runs scenario once for every row of flow (a row that must break
// up to ablation.Attempts times, each on fresh data, until it does), as a
// subtest named after its layers, and judges each row
// (ablation.Scenario.Judge). run gets the row with a probe on its layers:
// it resets the probe when its race begins, and every layer the row takes
// off must have been asked for during the race (the constraints, switched
// in the schema, excepted), or the row runs the code of a row with that
// layer on. Then Matrix checks the flow's block of docs/ABLATION.md, or
// rewrites it when SHOP_UPDATE_DOCS=1.
func Matrix(t *testing.T, flow ablation.Flow, scenario ablation.Scenario,
	run func(t *testing.T, row ablation.Row, probe *layers.Probe) Outcome) {
	t.Helper()
	if testing.Short() {
		t.Skip("races real PostgreSQL and Redis")
	}
	if err := flow.Standard(); err != nil {
		t.Fatal(err)
	}
	machine := docblock.Machine()
	seen := make([]ablation.Seen, len(flow.Rows))
	judged := make([]bool, len(flow.Rows))
	for i, row := range flow.Rows {
		t.Run(row.Slug(), func(t *testing.T) {
			for attempt := 1; attempt <= ablation.Attempts; attempt++ {
				var probe layers.Probe
				probed := row
				probed.Layers = row.Layers.Probed(&probe)
				out := run(t, probed, &probe)
				for _, l := range row.Layers.Taken() {
					if l != layers.Constraint && !probe.Asked(l) {
						t.Errorf("with %s the %s layer was never asked for while it was off: the row runs the code of a row with it on", row.Layers, l)
					}
				}
				seen[i].Runs = append(seen[i].Runs, out.Violations)
				seen[i].Progress = out.Progress
				t.Logf("%s, run %d: %d %s; %d %s", row.Layers, attempt, out.Violations, scenario.Counted, out.Progress, scenario.Progress)
				if !row.Breaks || out.Violations > 0 || t.Failed() {
					break
				}
			}
			if err := scenario.Judge(row, seen[i]); err != nil {
				t.Error(err)
			}
			judged[i] = !t.Failed()
		})
	}
	for _, ok := range judged {
		if !ok {
			return // a failed row, or rows left out by -run: nothing to write or compare
		}
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "ABLATION.md")
	if os.Getenv(EnvUpdateDocs) == "1" {
		commit, err := docblock.Commit(root)
		if err != nil {
			t.Fatal(err)
		}
		b := docblock.Block{Name: flow.Block(), Command: ablation.Command, Commit: commit, Machine: machine,
			Rows: flow.RowNames(), Body: flow.Body(scenario, seen)}
		if err := docblock.Update(path, b); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s in %s", b.Name, path)
		return
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := flow.Check(string(doc), scenario); err != nil {
		t.Errorf("docs/ABLATION.md is stale; run `%s`: %v", ablation.Command, err)
	}
}
