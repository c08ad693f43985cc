package mail

import (
	"testing"
	"unicode/utf8"
)

// TestFit: cut on a character, never inside one, with the ellipsis
// counted in the bound.
func TestFit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in    string
		limit int
		want  string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"ééé", 2, "é…"},
		{"🎟🎟🎟", 1, "…"},
		{"", 0, ""},
		{"a", 0, ""},
	} {
		if got := Fit(tt.in, tt.limit); got != tt.want || !utf8.ValidString(got) {
			t.Errorf("Fit(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}
