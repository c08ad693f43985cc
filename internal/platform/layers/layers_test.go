package layers_test

import (
	"slices"
	"testing"

	"github.com/shop-example/shop/internal/platform/layers"
)

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  layers.Set
		off  []layers.Layer
		str  string
	}{
		// The zero value is what production runs: every layer on.
		{name: "ZeroValue", set: layers.Set{}, str: "all on"},
		{name: "OffNothing", set: layers.Off(), str: "all on"},
		{name: "OneOff", set: layers.Off(layers.Lock), off: []layers.Layer{layers.Lock}, str: "lock off"},
		{name: "Several", set: layers.Off(layers.Version, layers.Idempotency, layers.Version),
			off: []layers.Layer{layers.Idempotency, layers.Version}, str: "idempotency, version off"},
		{name: "Database", set: layers.Off(layers.Database...), off: layers.Database, str: "state, version, constraint off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, l := range layers.All {
				if got, want := tc.set.On(l), !slices.Contains(tc.off, l); got != want {
					t.Errorf("On(%s) = %v, want %v", l, got, want)
				}
			}
			if got := tc.set.Taken(); !slices.Equal(got, tc.off) {
				t.Errorf("Taken() = %v, want %v", got, tc.off)
			}
			if got := tc.set.String(); got != tc.str {
				t.Errorf("String() = %q, want %q", got, tc.str)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	var p layers.Probe
	set := layers.Off(layers.Lock, layers.Version).Probed(&p)
	if !set.Same(layers.Off(layers.Lock, layers.Version)) {
		t.Error("a probed set is not the Same as the set it was made from")
	}
	set.On(layers.Lock)  // off: recorded
	set.On(layers.State) // on: nothing to record
	for _, l := range layers.All {
		if got, want := p.Asked(l), l == layers.Lock; got != want {
			t.Errorf("Asked(%s) = %v, want %v", l, got, want)
		}
	}
	p.Reset()
	if p.Asked(layers.Lock) {
		t.Error("Reset kept what was recorded")
	}
	layers.Off(layers.Lock).On(layers.Lock) // a set without a probe records nowhere
}
