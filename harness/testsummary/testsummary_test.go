package testsummary

import (
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tt := range []struct {
		name   string
		events string
		want   Counts
		shown  string
	}{
		{
			name: "PassSkipAndSubtests",
			events: `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"run","Package":"p","Test":"TestA/one"}
{"Action":"pass","Package":"p","Test":"TestA/one"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: needs nginx\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
`,
			want:  Counts{Passed: 2, Skipped: 1},
			shown: "ok  \tp\t0.1s\n",
		},
		{
			name: "FailedTestShowsItsOutput",
			events: `{"Action":"output","Package":"p","Test":"TestC","Output":"=== RUN   TestC\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: 2 anomalies; want none\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"--- FAIL: TestC (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.2s\n"}
{"Action":"fail","Package":"p"}
`,
			want:  Counts{Failed: 1},
			shown: "=== RUN   TestC\n    c_test.go:3: 2 anomalies; want none\n--- FAIL: TestC (0.00s)\nFAIL\nFAIL\tp\t0.2s\n",
		},
		{
			name: "BuildFailureCountsAsAFailure",
			events: `{"ImportPath":"q [q.test]","Action":"build-output","Output":"q/q.go:3:1: syntax error\n"}
{"ImportPath":"q [q.test]","Action":"build-fail"}
{"Action":"output","Package":"q","Output":"FAIL\tq [build failed]\n"}
{"Action":"fail","Package":"q"}
`,
			want:  Counts{Failed: 1},
			shown: "q/q.go:3:1: syntax error\nFAIL\tq [build failed]\n",
		},
		{
			name:   "NotAnEvent",
			events: "go: no such package\n",
			shown:  "go: no such package\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var shown strings.Builder
			got, err := Read(strings.NewReader(tt.events), &shown)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("counts %+v, want %+v", got, tt.want)
			}
			if shown.String() != tt.shown {
				t.Errorf("shown:\n%q\nwant:\n%q", shown.String(), tt.shown)
			}
		})
	}
	if got := (Counts{Passed: 3, Failed: 1, Skipped: 2}).String(); got != "3 passed, 1 failed, 2 skipped" {
		t.Errorf("summary %q", got)
	}
}
