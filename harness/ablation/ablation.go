// Package ablation lists the ablation matrices of docs/ABLATION.md: for
// each flow, the layer sets its race scenario runs with and what each row
// must show. Each flow's tests run them (testenv.Matrix: internal/app for
// orders and payments, internal/seats, internal/likes) and write
// the tables; docs/docs_test.go compares the rows a table names with Rows,
// without running anything.
//
// A matrix has the rows every matrix has (Flow.Standard): all layers on,
// each of the flow's layers off, and its database layers off. A flow says
// which layers it does not have, and why, instead of showing a row that
// switches nothing.
package ablation

import (
	"fmt"
	"strings"

	"github.com/shop-example/shop/internal/platform/layers"
)

// Command is what rewrites docs/ABLATION.md.
const Command = "make ablation"

// Attempts is how many runs a row that must break gets to show it: a race
// can miss its window on a loaded machine.
const Attempts = 3

// Flow is one flow's matrix.
type Flow struct {
	Name string // "create_order"; its table is the block "ablation/create_order"
	Test string // the test that runs it
	// Absent are the layers the flow does not have, each with the reason.
	// No row takes one off: its switch would switch nothing.
	Absent map[layers.Layer]string
	// With names, for a layer that only acts while others are off, those
	// others: its single-layer row takes them off too.
	With map[layers.Layer][]layers.Layer
	Rows []Row
}

// Row is one line of a matrix: the layers taken off, and what the flow's
// race scenario must show with them off.
type Row struct {
	Layers layers.Set
	// Variant names a way of running the scenario other than the flow's
	// own naive code (for example "read-check-write"); "" for none.
	Variant string
	// Breaks says the invariant must break: the row fails if no run finds
	// a violation, so it can never pass for a scenario that stopped
	// racing.
	Breaks bool
	// Band is where the count of violations must fall; the zero Band
	// means 0 for a row that holds and AtLeast(1) for one that breaks.
	Band Band
	// Why says which layer holds the invariant, or which invariant breaks
	// and how.
	Why string
}

// Band is a range of counts, Min to Max; Max < 0 is no bound above.
type Band struct{ Min, Max int }

// AtLeast is the band of n or more.
func AtLeast(n int) Band { return Band{Min: n, Max: -1} }

// Contains reports whether n is in b.
func (b Band) Contains(n int) bool { return n >= b.Min && (b.Max < 0 || n <= b.Max) }

// String is "0", "≥ 1" or "1–20".
func (b Band) String() string {
	switch {
	case b.Max < 0:
		return fmt.Sprintf("≥ %d", b.Min)
	case b.Min == b.Max:
		return fmt.Sprint(b.Min)
	default:
		return fmt.Sprintf("%d–%d", b.Min, b.Max)
	}
}

// Expected is the row's band, its default if it states none.
func (r Row) Expected() Band {
	switch {
	case r.Band != Band{}:
		return r.Band
	case r.Breaks:
		return AtLeast(1)
	default:
		return Band{}
	}
}

// Name is the row's name in its table: the layers off, and the variant.
func (r Row) Name() string {
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
	return off
}

// Slug is the row's name as a subtest: "lock+version_off/read-check-write".
func (r Row) Slug() string {
	name := strings.ReplaceAll(r.Layers.String(), ", ", "+")
	if r.Variant != "" {
		name += "/" + r.Variant
	}
	return strings.ReplaceAll(name, " ", "_")
}

// Block is the name of the flow's table in docs/ABLATION.md.
func (f Flow) Block() string { return "ablation/" + f.Name }

// RowNames are the names of the flow's rows, in order.
func (f Flow) RowNames() []string {
	names := make([]string, len(f.Rows))
	for i, r := range f.Rows {
		names[i] = r.Name()
	}
	return names
}

// Standard reports whether f has the rows every matrix has: all layers
// on; for each layer the flow has, that layer off (with the layers it is
// With); and the flow's database layers off. No row may take off a layer
// the flow does not have, and no two rows may be the same.
func (f Flow) Standard() error {
	var present, database []layers.Layer
	for _, l := range layers.All {
		if _, absent := f.Absent[l]; !absent {
			present = append(present, l)
		}
	}
	for _, l := range layers.Database {
		if _, absent := f.Absent[l]; !absent {
			database = append(database, l)
		}
	}
	want := []layers.Set{{}, layers.Off(database...)}
	for _, l := range present {
		want = append(want, layers.Off(append([]layers.Layer{l}, f.With[l]...)...))
	}
	for _, w := range want {
		found := false
		for _, r := range f.Rows {
			found = found || (r.Layers.Same(w) && r.Variant == "")
		}
		if !found {
			return fmt.Errorf("%s: the matrix has no row with %s", f.Name, w)
		}
	}
	seen := map[string]bool{}
	for _, r := range f.Rows {
		for _, l := range r.Layers.Taken() {
			if why, absent := f.Absent[l]; absent {
				return fmt.Errorf("%s: row %q takes off %s, which the flow does not have (%s)", f.Name, r.Name(), l, why)
			}
		}
		if seen[r.Name()] {
			return fmt.Errorf("%s: two rows are %q", f.Name, r.Name())
		}
		seen[r.Name()] = true
		if r.Breaks == r.Expected().Contains(0) {
			return fmt.Errorf("%s: row %q: its band %s does not say whether it breaks", f.Name, r.Name(), r.Expected())
		}
	}
	return nil
}

// Rows returns, for each table of docs/ABLATION.md, the names of the rows
// the code runs now, keyed by block name. Nothing is run.
func Rows() map[string][]string {
	out := map[string][]string{}
	for _, f := range Flows() {
		out[f.Block()] = f.RowNames()
	}
	return out
}
