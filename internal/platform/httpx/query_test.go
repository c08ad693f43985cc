package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

func TestLimit(t *testing.T) {
	tests := []struct {
		name  string
		query string // "" sends no limit parameter
		want  int    // 0: refused
	}{
		{"Default", "", 20},
		{"Min", "1", 1},
		{"Typical", "50", 50},
		{"Max", "100", 100},
		{"Zero", "0", 0},
		{"OverMax", "101", 0},
		{"Negative", "-1", 0},
		{"NotANumber", "abc", 0},
		{"Fraction", "2.5", 0},
		{"Huge", "99999999999999999999", 0},
		{"Spaces", " 5", 0},
	}
	e := echo.New()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := "/v1/products"
			if tt.query != "" {
				target += "?limit=" + url.QueryEscape(tt.query)
			}
			c := e.NewContext(httptest.NewRequest(http.MethodGet, target, nil), httptest.NewRecorder())
			got, err := Limit(c)
			if tt.want == 0 {
				if problem.CodeOf(err) != problem.Invalid {
					t.Fatalf("Limit(%q) = %d, %v; want invalid_request", tt.query, got, err)
				}
				if Status(problem.CodeOf(err)) != http.StatusBadRequest {
					t.Errorf("status = %d, want 400", Status(problem.CodeOf(err)))
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Limit(%q) = %d, %v; want %d, nil", tt.query, got, err, tt.want)
			}
		})
	}
}

func TestNewPage(t *testing.T) {
	double := func(n int) int { return 2 * n }
	for _, tc := range []struct {
		next, want string
	}{
		{"abc", `{"items":[2,4],"next_cursor":"abc"}`},
		{"", `{"items":[2,4],"next_cursor":null}`},
	} {
		b, err := json.Marshal(NewPage([]int{1, 2}, tc.next, double))
		if err != nil || string(b) != tc.want {
			t.Errorf("NewPage(next %q) = %s, %v; want %s", tc.next, b, err, tc.want)
		}
	}
	if b, _ := json.Marshal(NewPage([]int{}, "", double)); string(b) != `{"items":[],"next_cursor":null}` {
		t.Errorf("empty page = %s, want an empty array, not null", b)
	}
}
