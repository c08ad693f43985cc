package likes

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/platform/keyset"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestLike_Set(t *testing.T) {
	tests := []struct {
		name        string
		from, want  State
		wantChanged bool
	}{
		{"LikeUnliked", Unliked, Liked, true},
		{"UnlikeLiked", Liked, Unliked, true},
		{"LikeLiked", Liked, Liked, false},
		{"UnlikeUnliked", Unliked, Unliked, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Like{State: tt.from, Shard: 3, Version: 7}
			changed := l.Set(tt.want)
			if changed != tt.wantChanged {
				t.Errorf("Set(%s) from %s changed = %v, want %v", tt.want, tt.from, changed, tt.wantChanged)
			}
			if l.State != tt.want {
				t.Errorf("state after Set(%s) = %s", tt.want, l.State)
			}
			if l.Shard != 3 || l.Version != 7 {
				t.Errorf("Set moved the shard or the version: %+v", l)
			}
		})
	}
}

func TestDelta(t *testing.T) {
	tests := []struct {
		before, after State
		want          int
	}{
		{Unliked, Liked, 1},
		{Liked, Unliked, -1},
		{Liked, Liked, 0},
		{Unliked, Unliked, 0},
	}
	for _, tt := range tests {
		if got := Delta(tt.before, tt.after); got != tt.want {
			t.Errorf("Delta(%s, %s) = %d, want %d", tt.before, tt.after, got, tt.want)
		}
	}
}

func TestValidateTitle(t *testing.T) {
	tests := []struct {
		name, title string
		ok          bool
	}{
		{"Short", "a", true},
		{"Longest", strings.Repeat("é", MaxTitle), true},
		{"Empty", "", false},
		{"Blank", "   ", false},
		{"TooLong", strings.Repeat("a", MaxTitle+1), false},
		{"NotUTF8", "a\xffb", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateTitle(tt.title)
			if tt.ok != (err == nil) {
				t.Fatalf("ValidateTitle = %v, want ok %v", err, tt.ok)
			}
			if err != nil && problem.CodeOf(err) != problem.Invalid {
				t.Errorf("code %s, want %s", problem.CodeOf(err), problem.Invalid)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "invalid_request: title:") {
				t.Errorf("error %q does not name the field", err)
			}
		})
	}
}

func TestCursor(t *testing.T) {
	at := time.Date(2026, 6, 1, 12, 0, 0, 123456000, time.UTC)
	id := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	gotAt, gotID, err := keyset.Decode(keyset.Encode(at, id))
	if err != nil || !gotAt.Equal(at) || gotID != id {
		t.Fatalf("round trip = %v, %q, %v", gotAt, gotID, err)
	}
	for _, bad := range []string{"x", "bm90IGEgY3Vyc29y", keyset.Encode(at, "not-an-id")} {
		if _, _, err := keyset.Decode(bad); !errors.Is(err, problem.New(problem.Invalid, "")) {
			t.Errorf("keyset.Decode(%q) = %v, want invalid_request", bad, err)
		}
	}
}
