package httpx

import (
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/problem"
)

// ParamID returns the path parameter name as an id in its one spelling
// (package ids); any other spelling names no resource (404).
func ParamID(c echo.Context, name string) (string, error) {
	id := c.Param(name)
	if !ids.Valid(id) {
		return "", problem.New(problem.NotFound, "no such resource")
	}
	return id, nil
}
