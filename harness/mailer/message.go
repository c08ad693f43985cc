package mailer

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/problem"
)

// createMessage is POST /v1/messages.
func (h handlers) createMessage(c echo.Context) error {
	ctx := c.Request().Context()

	// Validation: the key and the body, before anything is remembered.
	key, err := idempotency.KeyFrom(c.Request().Header)
	if err != nil {
		return err
	}
	req, err := decodeMessage(c)
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

	// Decision: replay the key's message, fail the attempt, or send and
	// journal a new one.
	ans, err := h.s.send(key, req)
	if err != nil {
		return err
	}

	// Hold-back: the message is sent and journaled; its answer is late.
	if err := h.s.holdBack(ctx, ans); err != nil {
		return err
	}

	// Answer.
	if ans.replayed {
		c.Response().Header().Set(HeaderReplayed, "true")
		return httpx.JSON(c, http.StatusOK, ans.message)
	}
	return httpx.JSON(c, http.StatusCreated, ans.message)
}

func decodeMessage(c echo.Context) (Request, error) {
	var req Request
	if err := httpx.Bind(c, &req); err != nil {
		return Request{}, err
	}
	// The bounds the shop's client fits its messages to (mail.Check).
	if err := req.Check(); err != nil {
		return Request{}, problem.New(problem.Invalid, err.Error())
	}
	return req, nil
}

// sendAnswer is what a message request is told.
type sendAnswer struct {
	message  Message
	replayed bool          // the key's stored message, not a new one
	delay    time.Duration // the hold-back staged when it was decided
}

// send replays the message stored under key while the key is remembered,
// or fails the attempt as the faults say, or sends a new message and
// journals it. The caller holds key's lock; s.mu makes the decision and
// its line one step.
func (s *Server) send(key string, req Request) (sendAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	if m, ok := s.index.remembered(key, now, s.opts.KeyTTL); ok {
		if request(m) != req {
			return sendAnswer{}, keyReused()
		}
		return sendAnswer{message: m, replayed: true, delay: s.faults.Delay}, nil
	}

	// A failed attempt is decided before anything is recorded: nothing
	// was sent, and the key stays free for the retry.
	if s.faults.FailRate > 0 && s.opts.Rand() < s.faults.FailRate {
		return sendAnswer{}, &problem.Error{Code: problem.Unavailable, RetryAfter: time.Second,
			Detail: "the provider failed and sent nothing; retry with the same Idempotency-Key"}
	}

	m := Message{ID: "msg_" + uuid.NewString(), Reference: req.Reference, Kind: req.Kind,
		To: req.To, Subject: req.Subject, Text: req.Text, IdempotencyKey: key, CreatedAt: now}
	if err := s.journal.Append(m); err != nil {
		return sendAnswer{}, fmt.Errorf("send: %w", err)
	}
	return sendAnswer{message: m, delay: s.faults.Delay}, nil
}

// holdBack delays the answer by the hold-back staged when it was decided,
// or until the request ends.
func (s *Server) holdBack(ctx context.Context, ans sendAnswer) error {
	if ans.delay <= 0 {
		return nil
	}
	if err := s.opts.Sleep(ctx, ans.delay); err != nil {
		return fmt.Errorf("hold back %s: %w", ans.message.ID, err)
	}
	return nil
}
