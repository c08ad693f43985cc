// Package layers names the five defences every flow stacks (DESIGN.md §1)
// and gives the flows their one skeleton (flow.go): the lock, the bounded
// retry of a write that lost a race, and the count of what each layer
// stopped.
//
// The production code never asks whether a layer is on: it has no
// switch. A test takes a layer off by handing a flow a variant of the
// step the layer lives in (harness/variants), and names what it takes off
// with a Set, whose zero value is every layer on:
//
//	variants.For(layers.Off(layers.Lock, layers.Version), "", probe)
//
// A constraint is taken off in the test's own database (the flows'
// catalogues of them, app.Layer4). A switch must switch something: each
// variant tells the row's Probe when it took its layer off during the
// race, and a row of the ablation matrix whose layers were never taken
// off runs the same code as all layers on, and fails.
package layers

import (
	"strings"
	"sync/atomic"
)

// Layer is one defence, numbered as DESIGN.md numbers them.
type Layer uint8

// The layers, in the order a request meets them.
const (
	Idempotency Layer = iota // 0: the client's Idempotency-Key at the API
	Lock                     // 1: a lock on the resource: in Redis (redsync), or an advisory lock in PostgreSQL
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
	off   uint8  // bit l set: layer l is off
	probe *Probe // nil but in layer tests
}

// Off returns the set with every layer on but ls.
func Off(ls ...Layer) Set {
	var s Set
	for _, l := range ls {
		s.off |= 1 << l
	}
	return s
}

// On reports whether l is on. Asked of a layer that is off, it tells
// the set's probe.
func (s Set) On(l Layer) bool {
	on := s.off&(1<<l) == 0
	if !on && s.probe != nil {
		s.probe.asked.Or(1 << l)
	}
	return on
}

// Takes reports whether s takes l off, without telling its probe: for
// the harness that builds a row's variants (harness/variants).
func (s Set) Takes(l Layer) bool { return s.off&(1<<l) != 0 }

// Probe is the set's probe, nil unless Probed set one.
func (s Set) Probe() *Probe { return s.probe }

// Probed returns the set with p recording the layers asked for while off.
func (s Set) Probed(p *Probe) Set {
	s.probe = p
	return s
}

// Same reports whether s and o have the same layers off, whatever their
// probes.
func (s Set) Same(o Set) bool { return s.off == o.off }

// Probe records which layers were asked for (Set.On) while they were off:
// the steps where taking a layer off changed the code that ran. It is
// safe for concurrent use. Its zero value has recorded nothing.
type Probe struct {
	asked atomic.Uint32
}

// Took records that l was taken off where it would have acted: a
// variant of a production step (harness/variants) says so each time it
// ran without its layer.
func (p *Probe) Took(l Layer) {
	if p != nil {
		p.asked.Or(1 << l)
	}
}

// Reset forgets what p recorded, so that a test records only its race,
// not the setup before it.
func (p *Probe) Reset() { p.asked.Store(0) }

// Asked reports whether l was asked for while it was off.
func (p *Probe) Asked(l Layer) bool { return p.asked.Load()&(1<<l) != 0 }

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
