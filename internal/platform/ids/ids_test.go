package ids_test

import (
	"testing"

	"github.com/shop-example/shop/internal/platform/ids"
)

func TestValid(t *testing.T) {
	const id = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	tests := []struct {
		id   string
		want bool
	}{
		{id, true},
		{"0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B", false},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5B", false},
		{"{" + id + "}", false},
		{"urn:uuid:" + id, false},
		{"0190a1b2c3d47e5f8a9b0c1d2e3f4a5b", false},
		{" " + id, false},
		{id + "\n", false},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5", false},
		{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := ids.Valid(tt.id); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
