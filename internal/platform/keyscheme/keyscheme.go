// Package keyscheme names what the service writes that other replicas must
// read the same way: the idempotency records in PostgreSQL and the lock
// names in Redis (DESIGN.md §8). Each name carries the scheme it was made
// under, so that a new rule can be rolled out beside replicas that still
// follow the old one, behind a version prefix, instead of in place.
//
// Scheme 1 is the first release's: a record is named by its principal and
// the client's key alone (one key, one request, whatever the route), and
// a lock by its resource, "shop:lock:payment:ORDER".
//
// Scheme 2 scopes a key to its operation: a record is named
// "v2·pay_order·KEY", so that one client action id can key each step of
// it (the order, then its payment) instead of being refused as reused on
// the second; and a lock is named "shop:lock:v2:payment:ORDER".
//
// Replicas on schemes 1 and 2 side by side must never make two effects of
// one request (the transition rules, Scheme.Transition):
//   - a scheme-2 replica honours scheme-1 records: a key is claimed under
//     the name it already has, so a replay of a scheme-1 record is answered
//     from it (Names.Other);
//   - while the transition lasts it takes both lock names, the scheme-1
//     name first (Scheme.LockNames);
//   - it writes its records under the scheme-1 name, which a scheme-1
//     replica sees as taken (Names.Write).
//
// Every replica that claims a key, on any scheme, holds the same advisory
// lock in its transaction, on (principal, client key), so the record a
// replica finds under either name is all there is.
package keyscheme

import (
	"fmt"
	"strconv"
)

// Newest is the scheme a replica writes unless told otherwise.
const Newest = 2

// Scheme is what a replica writes and which of the other scheme's names it
// also takes.
type Scheme struct {
	// Version is the scheme the replica writes: 1 or 2
	// (SHOP_KEY_SCHEME). Scheme 1 behaves exactly as the release before
	// scheme 2 existed.
	Version int
	// Transition, on scheme 2, is the state while scheme-1 replicas may
	// still run (SHOP_KEY_TRANSITION): it takes the scheme-1 lock name
	// besides its own, and writes records under their scheme-1 name. Off
	// is the clean-up, once none runs.
	Transition bool
	// Blind, on scheme 2, switches the transition rules off altogether:
	// the replica neither reads nor takes scheme-1 names. It is no
	// setting; the test that shows the rules are needed uses it.
	Blind bool
}

// Parse reads SHOP_KEY_SCHEME and SHOP_KEY_TRANSITION; empty values are
// the defaults: the newest scheme, in transition.
func Parse(version, transition string) (Scheme, error) {
	s := Scheme{Version: Newest, Transition: true}
	if version != "" {
		v, err := strconv.Atoi(version)
		if err != nil || v < 1 || v > Newest {
			return Scheme{}, fmt.Errorf("SHOP_KEY_SCHEME: want 1 or 2, got %q", version)
		}
		s.Version = v
	}
	switch transition {
	case "", "on":
	case "off":
		s.Transition = false
	default:
		return Scheme{}, fmt.Errorf("SHOP_KEY_TRANSITION: want on or off, got %q", transition)
	}
	if s.Version == 1 {
		s.Transition = false // scheme 1 knows of no other
	}
	return s, nil
}

// String is the scheme as logged (key_scheme) and shown: "1", "2", or
// "2+1" while the transition lasts.
func (s Scheme) String() string {
	switch {
	case s.Version == 1:
		return "1"
	case s.Blind:
		return "2 (blind to 1)"
	case s.Transition:
		return "2+1"
	default:
		return "2"
	}
}

// LockNames are the Redis names of the lock on resource under prefix
// ("shop:lock:"), in the order they are taken: the scheme-1 name first, so
// that replicas on either scheme, and in either state, take what they
// share in one order.
func (s Scheme) LockNames(prefix, resource string) []string {
	v1 := prefix + resource
	v2 := prefix + "v2:" + resource
	switch {
	case s.Version == 1:
		return []string{v1}
	case s.Transition && !s.Blind:
		return []string{v1, v2}
	default:
		return []string{v2}
	}
}

// Names are the names of one request's idempotency record.
type Names struct {
	// Write is the name a new record is written under; Scheme the scheme
	// written with it (the records' scheme column).
	Write  string
	Scheme int
	// Other is the name the key may already have under the other scheme,
	// honoured when it exists: the key is claimed under it instead (and
	// if the key has both, every replica takes the scheme-1 one). Empty
	// when there is none to look for.
	Other string
	// Lock is what the claim's advisory lock is taken on: the client's
	// key under every scheme, so that replicas of both exclude each other
	// while a copy runs (Blind: the scheme-2 name).
	Lock string
}

// sep joins the parts of a scheme-2 name. It is not ASCII, and a scheme-1
// name (a client's key) is printable ASCII only, so no scheme-1 name is
// ever a scheme-2 one.
const sep = "·"

// Record names the record of key, sent on the route of operation (its
// flow: "pay_order").
func (s Scheme) Record(operation, key string) Names {
	v2 := "v2" + sep + operation + sep + key
	switch {
	case s.Version == 1:
		return Names{Write: key, Scheme: 1, Lock: key}
	case s.Blind:
		return Names{Write: v2, Scheme: 2, Lock: v2}
	case s.Transition:
		return Names{Write: key, Scheme: 2, Other: v2, Lock: key}
	default:
		return Names{Write: v2, Scheme: 2, Other: key, Lock: key}
	}
}
