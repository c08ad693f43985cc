package mailer

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/mail"
	"github.com/shop-example/shop/internal/platform/problem"
)

type handlers struct{ s *Server }

// keyReused is the answer to a key sent again with another request.
func keyReused() error {
	return problem.New(problem.IdempotencyReused,
		"this Idempotency-Key was used for a different message; send a new key for a new message")
}

// listMessages is GET /v1/messages[?reference=][&kind=]: the audit of
// every message sent, in creation order.
func (h handlers) listMessages(c echo.Context) error {
	kind := c.QueryParam("kind")
	if kind != "" && !mail.KnownKind(kind) {
		return problem.Errorf(problem.Invalid, "kind: must be one of %s", strings.Join(mail.Kinds, ", "))
	}
	h.s.mu.Lock()
	items := h.s.index.messagesFor(c.QueryParam("reference"), kind)
	h.s.mu.Unlock()
	return httpx.JSON(c, http.StatusOK, struct {
		Items []Message `json:"items"`
	}{items})
}

// getMessage is GET /v1/messages/{id}.
func (h handlers) getMessage(c echo.Context) error {
	id := c.Param("id")
	h.s.mu.Lock()
	m, ok := h.s.index.message(id)
	h.s.mu.Unlock()
	if !ok {
		return problem.Errorf(problem.NotFound, "no message %s", id)
	}
	return httpx.JSON(c, http.StatusOK, m)
}

// faultsBody is Faults on the wire, the delay in whole milliseconds.
type faultsBody struct {
	FailRate float64 `json:"fail_rate"`
	DelayMS  int64   `json:"delay_ms"`
}

// getFaults is GET /v1/faults.
func (h handlers) getFaults(c echo.Context) error {
	f := h.s.Faults()
	return httpx.JSON(c, http.StatusOK, faultsBody{FailRate: f.FailRate, DelayMS: f.Delay.Milliseconds()})
}

// putFaults is PUT /v1/faults: the whole setting, so a field left out is
// that fault off.
func (h handlers) putFaults(c echo.Context) error {
	var body faultsBody
	if err := httpx.Bind(c, &body); err != nil {
		return err
	}
	switch {
	case !(body.FailRate >= 0 && body.FailRate <= 1):
		return problem.New(problem.Invalid, "fail_rate: must be 0–1")
	case body.DelayMS < 0 || body.DelayMS > MaxDelay.Milliseconds():
		return problem.Errorf(problem.Invalid, "delay_ms: must be 0–%d", MaxDelay.Milliseconds())
	}
	f := Faults{FailRate: body.FailRate, Delay: time.Duration(body.DelayMS) * time.Millisecond}
	if err := h.s.SetFaults(f); err != nil {
		return problem.New(problem.Invalid, err.Error())
	}
	return httpx.JSON(c, http.StatusOK, body)
}
