package gateway

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/problem"
)

type refundBody struct {
	ChargeID string `json:"charge_id"`
}

// createRefund is POST /v1/refunds: the whole amount of one charge, once.
func (h handlers) createRefund(c echo.Context) error {
	// Validation: the key and the body.
	key, err := idempotency.KeyFrom(c.Request().Header)
	if err != nil {
		return err
	}
	var body refundBody
	if err := httpx.Bind(c, &body); err != nil {
		return err
	}
	if body.ChargeID == "" || len(body.ChargeID) > 255 {
		return problem.New(problem.Invalid, "charge_id: must be 1–255 characters")
	}
	req := request{Route: routeRefund, ChargeID: body.ChargeID}

	// Per-key lock: a second request with this key waits and replays.
	unlock, err := h.s.locks.Lock(c.Request().Context(), key)
	if err != nil {
		return fmt.Errorf("wait for key: %w", err)
	}
	defer unlock()

	// Decision: replay, or refund and journal.
	refund, replayed, err := h.s.refund(key, req)
	if err != nil {
		return err
	}

	// Answer.
	if replayed {
		c.Response().Header().Set(HeaderReplayed, "true")
	}
	return httpx.JSON(c, http.StatusCreated, refund)
}

// refund replays the refund stored under key, or refunds req.ChargeID and
// journals it. Under s.mu, of two keys refunding one charge exactly one
// finds it unrefunded.
func (s *Server) refund(key string, req request) (Refund, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.ledger.keys[key]; st != nil {
		if st.request != req {
			return Refund{}, false, keyReused()
		}
		return *st.refund, true, nil
	}
	ch := s.ledger.byID[req.ChargeID]
	if ch == nil {
		return Refund{}, false, problem.Errorf(problem.NotFound, "no charge %s", req.ChargeID)
	}
	if prior := s.ledger.refundOf[ch.ID]; prior != nil {
		return Refund{}, false, &problem.Error{Code: problem.InvalidState,
			Detail: fmt.Sprintf("charge %s is already refunded", ch.ID),
			Extra:  map[string]any{"refund_id": prior.ID}}
	}

	now := s.now().UTC()
	refund := Refund{ID: "re_" + uuid.NewString(), ChargeID: ch.ID,
		AmountCents: ch.AmountCents, Status: StatusSucceeded, CreatedAt: now}
	rec := record{Kind: kindRefunded, Key: key, Request: req, At: now, Refund: &refund}
	if err := s.journal.Append(rec); err != nil {
		return Refund{}, false, fmt.Errorf("refund: %w", err)
	}
	return refund, false, nil
}
