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

// Page is the body of a list route: {"items": [...], "next_cursor": ...},
// with next_cursor null on the last page.
type Page[R any] struct {
	Items      []R     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// NewPage renders items with render into a page; next is "" on the last page.
func NewPage[T, R any](items []T, next string, render func(T) R) Page[R] {
	p := Page[R]{Items: make([]R, len(items))}
	for i, it := range items {
		p.Items[i] = render(it)
	}
	if next != "" {
		p.NextCursor = &next
	}
	return p
}
