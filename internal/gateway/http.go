package gateway

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/problem"
)

type handlers struct{ s *Server }

const maxKeyLength = 255

// idempotencyKey returns the request's key: exactly one header of 1–255
// printable ASCII characters, the shop's own rule.
func idempotencyKey(h http.Header) (string, error) {
	values := h.Values(HeaderIdempotencyKey)
	switch {
	case len(values) == 0:
		return "", problem.New(problem.IdempotencyRequired, "this route needs an Idempotency-Key header")
	case len(values) > 1:
		return "", problem.New(problem.IdempotencyRequired, "send exactly one Idempotency-Key header")
	}
	key := values[0]
	if key == "" || len(key) > maxKeyLength {
		return "", problem.Errorf(problem.IdempotencyRequired, "Idempotency-Key must be 1–%d characters long", maxKeyLength)
	}
	if i := strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }); i >= 0 {
		return "", problem.Errorf(problem.IdempotencyRequired, "Idempotency-Key must be printable ASCII; character %d is not", i+1)
	}
	return key, nil
}

// keyReused is the answer to a key sent again with another request.
func keyReused() error {
	return problem.New(problem.IdempotencyReused,
		"this Idempotency-Key was used for a different request; send a new key for a new request")
}

// listCharges is GET /v1/charges[?reference=]: the audit of every charge
// that moved money, in creation order.
func (h handlers) listCharges(c echo.Context) error {
	return httpx.JSON(c, http.StatusOK, struct {
		Items []Charge `json:"items"`
	}{h.s.Charges(c.QueryParam("reference"))})
}
