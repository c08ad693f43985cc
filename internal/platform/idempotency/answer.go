package idempotency

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

const (
	// retryInProgress is the Retry-After of a 409 request_in_progress: the
	// flows answer in tens of milliseconds, so the first request is most
	// likely done by then.
	retryInProgress = time.Second
	// maxStoredBody bounds the answer kept in memory for storing. The
	// routes that take a key answer with one resource; a larger answer is
	// still sent, but not stored.
	maxStoredBody = 1 << 20
)

// storable reports whether an answer may be replayed for the key. A 5xx,
// a 429 and a refusal with Retry-After mean "not done, try again"; storing
// them would make a passing failure permanent for the key.
func storable(status int, err error) bool {
	return status < http.StatusInternalServerError &&
		status != http.StatusTooManyRequests &&
		!problem.Transient(err)
}

// refuse answers a request whose key is someone else's: another request's,
// a completed one's, or a still running one's.
func (s *Store) refuse(c echo.Context, flow string, prev *stored, fp []byte) error {
	ctx := c.Request().Context()
	rec := RecordFrom(ctx)
	s.metrics.Stopped(flow, layers.Idempotency.String())
	tracing.Stopped(ctx, layers.Idempotency.String())
	switch {
	case !bytes.Equal(prev.fingerprint, fp):
		s.outcome(rec, outcomeReused)
		return problem.New(problem.IdempotencyReused,
			"this Idempotency-Key was used for a different request (method, path or body); send a new key for a new request")
	case prev.response != nil:
		s.outcome(rec, outcomeReplayed)
		tracing.SetRequest(ctx, tracing.AttrReplayed.Bool(true))
		return replay(c, prev.response)
	default:
		return s.inProgress(rec)
	}
}

// inProgress counts and answers a request whose key another request
// holds: 409 request_in_progress, to be retried after retryInProgress.
func (s *Store) inProgress(r *Record) error {
	s.outcome(r, outcomeInProgress)
	return &problem.Error{
		Code:       problem.RequestInProgress,
		Detail:     "a request with this Idempotency-Key is still being processed",
		RetryAfter: retryInProgress,
	}
}

// replay sends a stored answer.
func replay(c echo.Context, r *response) error {
	h := c.Response().Header()
	for k, v := range r.headers {
		h.Set(k, v)
	}
	h.Set(HeaderReplayed, "true")
	c.Response().WriteHeader(r.status)
	if _, err := c.Response().Write(r.body); err != nil {
		return fmt.Errorf("replay stored answer: %w", err)
	}
	return nil
}

// keptHeaders returns the headers stored with an answer: those that are
// part of it. The rest (request id, date, length) belong to each response.
func keptHeaders(h http.Header) map[string]string {
	kept := make(map[string]string, 4)
	for _, name := range []string{echo.HeaderContentType, echo.HeaderLocation, "ETag", echo.HeaderRetryAfter} {
		if v := h.Get(name); v != "" {
			kept[name] = v
		}
	}
	return kept
}
