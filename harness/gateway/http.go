package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/problem"
)

type handlers struct{ s *Server }

// keyReused is the answer to a key sent again with another request.
func keyReused() error {
	return problem.New(problem.IdempotencyReused,
		"this Idempotency-Key was used for a different request; send a new key for a new request")
}

// listCharges is GET /v1/charges[?reference=]: the audit of every charge
// that moved money, in creation order, each with its refunds.
func (h handlers) listCharges(c echo.Context) error {
	return httpx.JSON(c, http.StatusOK, struct {
		Items []Audited `json:"items"`
	}{h.s.audit(c.QueryParam("reference"))})
}

// audit is the charges with reference ("" = all), each with its refunds,
// read in one step.
func (s *Server) audit(reference string) []Audited {
	s.mu.Lock()
	defer s.mu.Unlock()
	charges := s.ledger.chargesFor(reference)
	out := make([]Audited, len(charges))
	for i, ch := range charges {
		out[i] = Audited{Charge: ch, Refunds: s.ledger.refundsFor(ch.ID)}
	}
	return out
}
