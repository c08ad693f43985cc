package keyscheme

import (
	"fmt"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		version, transition string
		want                Scheme
	}{
		{"", "", Scheme{Version: 2, Transition: true}},
		{"2", "on", Scheme{Version: 2, Transition: true}},
		{"2", "off", Scheme{Version: 2}},
		{"1", "", Scheme{Version: 1}},
		{"1", "on", Scheme{Version: 1}},
	} {
		got, err := Parse(tc.version, tc.transition)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q, %q) = %+v, %v; want %+v", tc.version, tc.transition, got, err, tc.want)
		}
	}
	for _, bad := range [][2]string{{"0", ""}, {"3", ""}, {"v2", ""}, {"2", "yes"}, {"2", "On"}} {
		if _, err := Parse(bad[0], bad[1]); err == nil {
			t.Errorf("Parse(%q, %q) = nil error", bad[0], bad[1])
		}
	}
}

// Every scheme and state names a lock and a record so that the pairs that
// may run side by side share a name: the scheme-1 lock name comes first
// wherever it is taken, and a record's name is looked for under the other
// scheme's.
func TestNames(t *testing.T) {
	v1 := Scheme{Version: 1}
	v2plus := Scheme{Version: 2, Transition: true}
	v2 := Scheme{Version: 2}
	blind := Scheme{Version: 2, Transition: true, Blind: true}
	for _, tc := range []struct {
		s      Scheme
		locks  string
		record Names
	}{
		{v1, `["shop:lock:payment:O1"]`, Names{Write: "K", Scheme: 1, Lock: "K"}},
		{v2plus, `["shop:lock:payment:O1" "shop:lock:v2:payment:O1"]`, Names{Write: "K", Scheme: 2, Other: "v2·pay_order·K", Lock: "K"}},
		{v2, `["shop:lock:v2:payment:O1"]`, Names{Write: "v2·pay_order·K", Scheme: 2, Other: "K", Lock: "K"}},
		{blind, `["shop:lock:v2:payment:O1"]`, Names{Write: "v2·pay_order·K", Scheme: 2, Lock: "v2·pay_order·K"}},
	} {
		if got := fmt.Sprintf("%q", tc.s.LockNames("shop:lock:", "payment:O1")); got != tc.locks {
			t.Errorf("%s: lock names %s, want %s", tc.s, got, tc.locks)
		}
		if got := tc.s.Record("pay_order", "K"); got != tc.record {
			t.Errorf("%s: record names %+v, want %+v", tc.s, got, tc.record)
		}
	}
}
