package bench

import (
	"slices"
	"testing"
)

func TestParseShardCounts(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1,4,16,64", []int{1, 4, 16, 64}, true},
		{" 8 ", []int{8}, true},
		{"256", []int{256}, true},
		{"0", nil, false},
		{"257", nil, false},
		{"1,,4", nil, false},
		{"many", nil, false},
	}
	for _, tt := range tests {
		got, err := parseShardCounts(tt.in)
		if tt.ok != (err == nil) || !slices.Equal(got, tt.want) {
			t.Errorf("parseShardCounts(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseBenchFlags_Likes(t *testing.T) {
	o, err := parseBenchFlags("likes", nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.clients != 64 || o.posts != 1000 || !slices.Equal(o.shardCounts, []int{1, 4, 16, 64}) {
		t.Errorf("defaults: %d clients, %d posts, shards %v; want 64, 1000, [1 4 16 64]", o.clients, o.posts, o.shardCounts)
	}
	if o, err := parseBenchFlags("orders", nil); err != nil || o.clients != 32 {
		t.Errorf("orders keeps 32 clients: %d, %v", o.clients, err)
	}
	for _, bad := range [][]string{{"-shards", "0"}, {"-posts", "0"}} {
		if _, err := parseBenchFlags("likes", bad); err == nil {
			t.Errorf("parseBenchFlags(likes, %v) = nil error", bad)
		}
	}
}
