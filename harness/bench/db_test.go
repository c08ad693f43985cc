package bench

import "testing"

func TestBaselineConns(t *testing.T) {
	tests := []struct {
		name                   string
		clients, free, service int
		want                   int
	}{
		{"RoomForAll", 32, 297, 12, 32},
		{"MoreClientsThanRoom", 128, 97, 12, 81},
		{"ExactlyRoom", 81, 97, 12, 81},
		{"NoRoom", 8, 10, 12, -6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := baselineConns(tt.clients, tt.free, tt.service); got != tt.want {
				t.Errorf("baselineConns(%d clients, %d free, %d for the service) = %d, want %d",
					tt.clients, tt.free, tt.service, got, tt.want)
			}
		})
	}
}
