package faults_test

import (
	"testing"

	"github.com/shop-example/shop/harness/faults"
)

func TestScenarios_OneRowEach(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range faults.Scenarios() {
		if s.Row == "" || s.Name == "" {
			t.Errorf("scenario %+v: want a row and a name", s)
		}
		if seen[s.Row] {
			t.Errorf("row %s named twice", s.Row)
		}
		seen[s.Row] = true
	}
	if got, want := len(faults.Rows()), len(faults.Scenarios()); got != want {
		t.Errorf("%d rows for %d scenarios", got, want)
	}
}
