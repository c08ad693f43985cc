package httpx

import (
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

// ParamID returns the path parameter name as an id in its one spelling:
// a UUID in the lower-case 8-4-4-4-12 form every answer uses. uuid.Parse
// and PostgreSQL also read upper case, braces, no dashes and urn:uuid:, but
// a lock keyed on the raw text would then hold one order under several
// names; so any other spelling names no resource (404), and lock keys, SQL
// and answers all see the same string.
func ParamID(c echo.Context, name string) (string, error) {
	id := c.Param(name)
	if !canonicalID(id) {
		return "", problem.New(problem.NotFound, "no such resource")
	}
	return id, nil
}

func canonicalID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}
