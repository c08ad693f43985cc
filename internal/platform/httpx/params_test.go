package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

func TestParamID(t *testing.T) {
	const id = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	tests := []struct {
		name, path string
		ok         bool
	}{
		{"Canonical", "/things/" + id, true},
		{"UpperCase", "/things/0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B", false},
		{"OneUpper", "/things/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5B", false},
		{"Braces", "/things/%7B" + id + "%7D", false},
		{"URN", "/things/urn:uuid:" + id, false},
		{"NoDashes", "/things/0190a1b2c3d47e5f8a9b0c1d2e3f4a5b", false},
		{"PercentEncodedDigit", "/things/%30190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", false},
		{"TrailingSpace", "/things/" + id + "%20", false},
		{"Short", "/things/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5", false},
		{"NotAUUID", "/things/123", false},
	}
	e := echo.New()
	var got string
	var gotErr error
	e.GET("/things/:id", func(c echo.Context) error {
		got, gotErr = ParamID(c, "id")
		return nil
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, gotErr = "", nil
			e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tt.path, nil))
			if tt.ok {
				if gotErr != nil || got != id {
					t.Errorf("ParamID = %q, %v; want %q, nil", got, gotErr, id)
				}
				return
			}
			if problem.CodeOf(gotErr) != problem.NotFound || got != "" {
				t.Errorf("ParamID = %q, %v; want not_found", got, gotErr)
			}
		})
	}
}
