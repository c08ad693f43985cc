// Package layers names the five defences every flow stacks (DESIGN.md §1)
// and lets a test take some of them off.
//
// A flow's Config carries a Set of the layers that are on. Its zero value
// is every layer on: production code never names a layer, so it cannot
// forget one, and a test names exactly what it takes off:
//
//	orders.Config{..., Layers: layers.Off(layers.Lock, layers.Version)}
//
// Flows ask the set, at the step each layer guards:
//
//	if s.layers.On(layers.Version) { … WHERE version = $read … }
//
// Two layers live outside the flow's code. The idempotency layer is a
// middleware on the route: a test that takes it off calls the service
// directly, or registers the route without it. A constraint cannot be
// switched off in Go: the test harness drops the flow's constraints in the
// test's own database when its set has Constraint off.
package layers

import "strings"

// Layer is one defence, numbered as DESIGN.md numbers them.
type Layer uint8

// The layers, in the order a request meets them.
const (
	Idempotency Layer = iota // 0: the client's Idempotency-Key at the API
	Lock                     // 1: a redsync lock on the resource
	State                    // 2: the status state machine
	Version                  // 3: version-checked or atomic conditional writes
	Constraint               // 4: unique and check constraints in the schema
)

var names = [...]string{"idempotency", "lock", "state", "version", "constraint"}

// String is the layer's name, as the conflict counter labels it.
func (l Layer) String() string {
	if int(l) < len(names) {
		return names[l]
	}
	return "layer(" + string(rune('0'+l)) + ")"
}

// All is every layer, in order.
var All = []Layer{Idempotency, Lock, State, Version, Constraint}

// Database are the layers that hold in PostgreSQL, whatever the processes
// in front of it do: the state machine (asked of the row read in the
// transaction), the version check and the constraints. They are what makes
// an outcome correct; the lock and the key make it cheap and repeatable.
var Database = []Layer{State, Version, Constraint}

// Set is a set of layers on. The zero value is all of them.
type Set struct {
	off uint8 // bit l set: layer l is off
}

// Off returns the set with every layer on but ls.
func Off(ls ...Layer) Set {
	var s Set
	for _, l := range ls {
		s.off |= 1 << l
	}
	return s
}

// On reports whether l is on.
func (s Set) On(l Layer) bool { return s.off&(1<<l) == 0 }

// Taken returns the layers taken off, in order.
func (s Set) Taken() []Layer {
	var out []Layer
	for _, l := range All {
		if !s.On(l) {
			out = append(out, l)
		}
	}
	return out
}

// String says which layers are off: "all on", or "lock, version off".
func (s Set) String() string {
	taken := s.Taken()
	if len(taken) == 0 {
		return "all on"
	}
	parts := make([]string, len(taken))
	for i, l := range taken {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ") + " off"
}
