package httpx

import (
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
