package httpx

import (
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

// Page size limits of the list routes (API.md).
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

// Limit reads the "limit" query parameter: 1–100, default 20.
func Limit(c echo.Context) (int, error) {
	raw := c.QueryParam("limit")
	if raw == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, problem.Errorf(problem.Invalid, "limit: must be an integer 1–%d", MaxLimit)
	}
	return n, nil
}
