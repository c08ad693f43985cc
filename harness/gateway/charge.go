package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/problem"
)

type chargeBody struct {
	AmountCents   int64  `json:"amount_cents"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
}

// createCharge is POST /v1/charges.
func (h handlers) createCharge(c echo.Context) error {
	ctx := c.Request().Context()

	// Validation: the key and the body, before anything is remembered.
	key, err := idempotency.KeyFrom(c.Request().Header)
	if err != nil {
		return err
	}
	req, err := decodeCharge(c)
	if err != nil {
		return err
	}

	// Per-key lock: a second request with this key waits for this one's
	// answer, hold-back included, and then replays it.
	unlock, err := h.s.locks.Lock(ctx, key)
	if err != nil {
		return fmt.Errorf("wait for key: %w", err)
	}
	defer unlock()

	// Decision: replay the key's answer, or decide and journal a new one.
	ans, err := h.s.charge(key, req)
	if err != nil {
		return err
	}
	if ans.fresh && h.s.opts.AfterCharge != nil {
		h.s.opts.AfterCharge(ans.charge)
	}

	// Hold-back: pm_card_slow answers nobody before created_at + SlowDelay.
	if ans.refusal == nil {
		if err := h.s.holdBack(ctx, ans.charge); err != nil {
			return err
		}
	}

	// Answer.
	if ans.replayed {
		c.Response().Header().Set(HeaderReplayed, "true")
	}
	if ans.refusal != nil {
		return ans.refusal
	}
	return httpx.JSON(c, http.StatusCreated, ans.charge)
}

// knownMethod reports whether m is one of the test payment methods.
func knownMethod(m string) bool {
	switch m {
	case MethodOK, MethodDeclined, MethodSlow, MethodFlaky:
		return true
	}
	return false
}

func decodeCharge(c echo.Context) (request, error) {
	var body chargeBody
	if err := httpx.Bind(c, &body); err != nil {
		return request{}, err
	}
	switch {
	case body.AmountCents <= 0:
		return request{}, problem.New(problem.Invalid, "amount_cents: must be a positive integer")
	case body.PaymentMethod == "" || len(body.PaymentMethod) > 255:
		return request{}, problem.New(problem.Invalid, "payment_method: must be 1–255 characters")
	case !knownMethod(body.PaymentMethod):
		// As a processor answers a payment method it has never issued: a
		// bad request, decided before anything is remembered, not a decline.
		return request{}, problem.Errorf(problem.Invalid, "payment_method: no such payment method %q; the test methods are %s, %s, %s and %s",
			body.PaymentMethod, MethodOK, MethodDeclined, MethodSlow, MethodFlaky)
	case body.Reference == "" || len(body.Reference) > 255:
		return request{}, problem.New(problem.Invalid, "reference: must be 1–255 characters")
	}
	return request{Route: routeCharge, AmountCents: body.AmountCents,
		PaymentMethod: body.PaymentMethod, Reference: body.Reference}, nil
}

// chargeAnswer is what a charge request is told: a charge, or a refusal.
type chargeAnswer struct {
	charge   Charge
	refusal  error // a decline or a failed attempt; nil when charged
	replayed bool  // the key's stored answer, not a new decision
	fresh    bool  // the charge was made by this request
}

// charge replays the answer stored under key, or decides one by payment
// method and journals it. The caller holds key's lock; s.mu makes the
// decision and its line one step.
func (s *Server) charge(key string, req request) (chargeAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ledger.keys[key]
	failures := 0
	if st != nil {
		switch {
		case st.request != req:
			return chargeAnswer{}, keyReused()
		case st.charge != nil:
			return chargeAnswer{charge: *st.charge, replayed: true}, nil
		case st.decline != nil:
			return chargeAnswer{refusal: declined(*st.decline), replayed: true}, nil
		}
		failures = st.failures // only failed attempts so far: this is the next one
	}

	now := s.now().UTC()
	rec := record{Kind: kindCharged, Key: key, Request: req, At: now}
	switch req.PaymentMethod {
	case MethodOK, MethodSlow:
	case MethodFlaky:
		if failures == 0 {
			rec.Kind = kindFailed
		}
	case MethodDeclined:
		rec.Kind, rec.Decline = kindDeclined, &decline{Code: "card_declined", Detail: "the card was declined"}
	}
	if rec.Kind == kindCharged {
		rec.Charge = &Charge{ID: "ch_" + uuid.NewString(), Status: StatusSucceeded,
			AmountCents: req.AmountCents, Reference: req.Reference,
			PaymentMethod: req.PaymentMethod, CreatedAt: now}
	}
	if err := s.journal.Append(rec); err != nil {
		return chargeAnswer{}, fmt.Errorf("charge: %w", err)
	}

	switch rec.Kind {
	case kindCharged:
		return chargeAnswer{charge: *rec.Charge, fresh: true}, nil
	case kindFailed:
		return chargeAnswer{refusal: problem.New(problem.Unavailable,
			"the processor failed and charged nothing; retry with the same Idempotency-Key")}, nil
	default:
		return chargeAnswer{refusal: declined(*rec.Decline)}, nil
	}
}

// declined is the 402 of a refused charge. The shop's codes have no
// card_declined, so the processor's reason travels as decline_code, as
// card processors send it.
func declined(d decline) error {
	return &problem.Error{Code: problem.PaymentDeclined, Detail: d.Detail,
		Extra: map[string]any{"decline_code": d.Code}}
}

// holdBack delays the answer for a pm_card_slow charge until
// created_at + SlowDelay, measured from the journaled created_at, so a
// replay (even after a restart) waits only for what is left.
func (s *Server) holdBack(ctx context.Context, ch Charge) error {
	if ch.PaymentMethod != MethodSlow {
		return nil
	}
	wait := ch.CreatedAt.Add(s.opts.SlowDelay).Sub(s.now())
	if wait <= 0 {
		return nil
	}
	if err := s.opts.Sleep(ctx, wait); err != nil {
		return fmt.Errorf("hold back %s: %w", ch.ID, err)
	}
	return nil
}
