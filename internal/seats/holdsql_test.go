package seats

import (
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/platform/layers"
)

// TestHoldSeatsSQL: the seats' write carries the condition of each layer
// on, and none of a layer off.
func TestHoldSeatsSQL(t *testing.T) {
	for _, tc := range []struct {
		on             layers.Set
		state, version bool
	}{
		{layers.Set{}, true, true},
		{layers.Off(layers.State), false, true},
		{layers.Off(layers.Version), true, false},
		{layers.Off(layers.State, layers.Version), false, false},
	} {
		sql := holdSeatsSQL(tc.on)
		if got := strings.Contains(sql, "status = 'available'"); got != tc.state {
			t.Errorf("%s: the state condition in the write: %v, want %v\n%s", tc.on, got, tc.state, sql)
		}
		if got := strings.Contains(sql, "s.version = r.version"); got != tc.version {
			t.Errorf("%s: the version condition in the write: %v, want %v\n%s", tc.on, got, tc.version, sql)
		}
	}
}
