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

// Codes a refusal of a refund carries as processor_code, Stripe's
// spelling of what the shop's problem code says.
const (
	CodeChargeAlreadyRefunded = "charge_already_refunded"
)

type refundBody struct {
	ChargeID string `json:"charge_id"`
	// AmountCents is the part of the charge to give back; absent, all
	// that is left of it.
	AmountCents *int64 `json:"amount_cents"`
}

// createRefund is POST /v1/refunds: all or part of one charge, once per
// key.
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
	if body.AmountCents != nil {
		if *body.AmountCents < 1 {
			return problem.New(problem.Invalid, "amount_cents: must be a positive integer")
		}
		req.AmountCents = *body.AmountCents
	}

	if hook := h.s.beforeRefund.Load(); hook != nil {
		(*hook)(body.ChargeID)
	}

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

// refund replays the refund stored under key, or refunds req.AmountCents
// of req.ChargeID (0: all that is left of it) and journals it. Under s.mu,
// of two keys refunding one charge the second sees what the first gave
// back: like a real processor's, the refunds of a charge never give back
// more than it took (unless Options.NoRefundLimit). That bound is the
// charge's, not the order's: two refunds of a part each, together within
// the charge, both go through.
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
	left := ch.AmountCents - ch.RefundedCents
	amount := req.AmountCents
	if amount == 0 {
		amount = left
	}
	switch {
	case s.opts.NoRefundLimit && amount <= 0:
		amount = ch.AmountCents // all of it, again: the check is off
	case s.opts.NoRefundLimit:
	case left <= 0:
		refunds := s.ledger.refundsOf[ch.ID]
		return Refund{}, false, &problem.Error{Code: problem.InvalidState,
			Detail: fmt.Sprintf("charge %s is already refunded", ch.ID),
			Extra:  map[string]any{"refund_id": refunds[len(refunds)-1].ID, "processor_code": CodeChargeAlreadyRefunded}}
	case amount > left:
		return Refund{}, false, &problem.Error{Code: problem.RefundExceedsRemaining,
			Detail: fmt.Sprintf("a refund of %d cents asked; charge %s has %d of its %d cents left", amount, ch.ID, left, ch.AmountCents),
			Extra:  map[string]any{"remaining_cents": left}}
	}

	now := s.now().UTC()
	refund := Refund{ID: "re_" + uuid.NewString(), ChargeID: ch.ID,
		AmountCents: amount, Status: StatusSucceeded, CreatedAt: now}
	rec := record{Kind: kindRefunded, Key: key, Request: req, At: now, Refund: &refund}
	if err := s.journal.Append(rec); err != nil {
		return Refund{}, false, fmt.Errorf("refund: %w", err)
	}
	return refund, false, nil
}
