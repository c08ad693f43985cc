// Package testsummary reads the event stream of `go test -json` and writes
// what a plain `go test` run shows, then one line that counts the tests:
// "N passed, N failed, N skipped". `make test` runs through it
// (cmd/testsummary), so a run ends with its count.
//
// What is shown: each package's own lines ("ok  pkg 1.2s", "FAIL pkg",
// build errors, a panic outside any test) as they come, and the whole
// output of each test that failed, when it fails. A passing or skipped
// test's output is dropped, as `go test` without -v drops it.
package testsummary

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Counts are the tests of a run by outcome. Subtests count as tests. A
// package that failed outside any test (it did not build, its TestMain
// failed, it timed out between tests) counts as one failed.
type Counts struct {
	Passed, Failed, Skipped int
}

// String is the summary line.
func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}

// event is one line of `go test -json` (cmd/test2json's TestEvent), with
// the build events of `go test` (ImportPath, "build-output").
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
}

type testKey struct{ pkg, test string }

// Read reads events from r until it ends, writing what a plain run
// shows to w, and returns the counts. A line that is not an event (go
// test's own complaints, say) is written as it is.
func Read(r io.Reader, w io.Writer) (Counts, error) {
	var c Counts
	output := map[testKey][]string{} // each running test's output so far
	failedIn := map[string]bool{}    // packages with a failed test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
				return c, err
			}
			continue
		}
		k := testKey{e.Package, e.Test}
		var show string
		switch {
		case e.Action == "build-output":
			show = e.Output
		case e.Test == "" && e.Action == "output" && e.Output != "PASS\n":
			show = e.Output // a plain run shows "ok" alone for a package that passed
		case e.Test == "" && e.Action == "fail" && !failedIn[e.Package]:
			c.Failed++ // failed outside any test
		case e.Test == "":
		case e.Action == "output":
			output[k] = append(output[k], e.Output)
		case e.Action == "pass":
			c.Passed++
			delete(output, k)
		case e.Action == "skip":
			c.Skipped++
			delete(output, k)
		case e.Action == "fail":
			c.Failed++
			failedIn[e.Package] = true
			for _, o := range output[k] {
				show += o
			}
			delete(output, k)
		}
		if show != "" {
			if _, err := io.WriteString(w, show); err != nil {
				return c, err
			}
		}
	}
	return c, sc.Err()
}
