package ablation_test

import (
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/internal/platform/layers"
)

func TestFlows_Standard(t *testing.T) {
	for _, f := range ablation.Flows() {
		if err := f.Standard(); err != nil {
			t.Error(err)
		}
	}
}

func TestStandard_Refuses(t *testing.T) {
	base := func() ablation.Flow {
		f := ablation.CreateOrder()
		f.Rows = append([]ablation.Row(nil), f.Rows...)
		return f
	}
	for name, change := range map[string]func(*ablation.Flow){
		"a single-layer row missing": func(f *ablation.Flow) { f.Rows = f.Rows[:2] },
		"an absent layer taken off": func(f *ablation.Flow) {
			f.Rows = append(f.Rows, ablation.Row{Layers: layers.Off(layers.State)})
		},
		"the lock without the layer it acts with": func(f *ablation.Flow) { f.With = nil },
		"two rows the same":                       func(f *ablation.Flow) { f.Rows = append(f.Rows, f.Rows[0]) },
		"a band that does not break": func(f *ablation.Flow) {
			f.Rows[len(f.Rows)-1].Band = ablation.Band{Min: 0, Max: 5}
		},
	} {
		f := base()
		change(&f)
		if err := f.Standard(); err == nil {
			t.Errorf("%s: Standard found nothing wrong", name)
		}
	}
}

func TestJudge(t *testing.T) {
	s := ablation.Scenario{Counted: "oversold units", Progress: "units sold", ProgressWant: 40}
	holds := ablation.Row{}
	breaks := ablation.Row{Layers: layers.Off(layers.Version), Breaks: true}
	for _, tc := range []struct {
		name string
		row  ablation.Row
		seen ablation.Seen
		ok   bool
	}{
		{"Holds", holds, ablation.Seen{Runs: []int{0}, Progress: 40}, true},
		{"HoldsWithNothingDone", holds, ablation.Seen{Runs: []int{0}, Progress: 0}, false},
		{"HoldBroken", holds, ablation.Seen{Runs: []int{2}, Progress: 40}, false},
		{"HoldRunTwice", holds, ablation.Seen{Runs: []int{0, 0}, Progress: 40}, false},
		{"BrokeFirst", breaks, ablation.Seen{Runs: []int{7}}, true},
		{"BrokeSecond", breaks, ablation.Seen{Runs: []int{0, 7}}, true},
		{"NeverBroke", breaks, ablation.Seen{Runs: []int{0, 0, 0}}, false},
		{"RanAfterBreaking", breaks, ablation.Seen{Runs: []int{3, 7}}, false},
		{"TooManyRuns", breaks, ablation.Seen{Runs: []int{0, 0, 0, 1}}, false},
		{"OutsideStatedBand", ablation.Row{Breaks: true, Band: ablation.Band{Min: 1, Max: 5}}, ablation.Seen{Runs: []int{9}}, false},
	} {
		if err := s.Judge(tc.row, tc.seen); (err == nil) != tc.ok {
			t.Errorf("%s: Judge = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestCheck(t *testing.T) {
	f := ablation.CancelOrder()
	s := ablation.Scenario{Text: "20 orders.", Counted: "units returned more than once, of 20 orders", Progress: "orders cancelled", ProgressWant: 20}
	seen := make([]ablation.Seen, len(f.Rows))
	for i, r := range f.Rows {
		seen[i] = ablation.Seen{Runs: []int{0}, Progress: 20}
		if r.Breaks {
			seen[i].Runs = []int{0, 12}
		}
	}
	b := docblock.Block{Name: f.Block(), Command: ablation.Command, Commit: "0123456789ab", Machine: "2 cores",
		Rows: f.RowNames(), Body: f.Body(s, seen)}
	doc, err := docblock.Replace("# Ablation\n", b)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(doc, s); err != nil {
		t.Fatalf("the doc just written: %v", err)
	}
	for name, stale := range map[string]string{
		"a count outside its band":   strings.Replace(doc, "| holds: 0 | 0 | 20 |", "| holds: 0 | 3 | 20 |", 1),
		"a row that did no work":     strings.Replace(doc, "| holds: 0 | 0 | 20 |", "| holds: 0 | 0 | 0 |", 1),
		"a must-break row that held": strings.Replace(doc, "| 0, 12 |", "| 0, 0 |", 1),
		"a band edited":              strings.Replace(doc, "**breaks**: ≥ 1", "**breaks**: ≥ 0", 1),
		"a reason edited":            strings.Replace(doc, "the lock alone", "the lock, alone", 1),
		"a row renamed":              strings.Replace(doc, `"lock"`, `"locks"`, 1),
		"the sizes edited":           strings.Replace(doc, "20 orders.", "30 orders.", 1),
	} {
		if stale == doc {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if err := f.Check(stale, s); err == nil {
			t.Errorf("%s: Check found nothing wrong", name)
		}
	}
}

func TestRows(t *testing.T) {
	rows := ablation.Rows()
	if got := rows["ablation/create_order"]; len(got) == 0 || got[0] != "none" || got[2] != "idempotency, lock" {
		t.Errorf("create_order rows = %q", got)
	}
	if len(rows) != len(ablation.Flows()) {
		t.Errorf("%d blocks, want one per flow", len(rows))
	}
}
