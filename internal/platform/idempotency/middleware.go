package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// HeaderKey is the request header that carries the key; HeaderReplayed
// marks a response that was replayed from the store.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
	maxKeyLength   = 255
	// retryInProgress is the Retry-After of a 409 request_in_progress: the
	// flows answer in tens of milliseconds, so the first request is most
	// likely done by then.
	retryInProgress = time.Second
)

// Middleware requires an Idempotency-Key on the route it wraps and makes the
// route run at most once per key (DESIGN.md §3). It must run after the auth
// middleware: keys are scoped by auth.PrincipalFrom(ctx).Scope().
//
//	g.POST("/orders", h.create, authMW.User, idem.Middleware)
//
// Conflicts it stops are counted under the route's path as the flow; For
// names the flow instead.
func (s *Store) Middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return s.For("")(next)
}

// For is Middleware counting the conflicts it stops under flow, the name
// the domain service uses for the same flow (for example "create_order"),
// so one flow's conflicts read as one series whichever layer stopped them.
func (s *Store) For(flow string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return s.guard(flow, next)
	}
}

func (s *Store) guard(flow string, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		key, err := KeyFrom(req.Header)
		if err != nil {
			return err
		}
		p, ok := auth.PrincipalFrom(req.Context())
		if !ok {
			return errors.New("idempotency middleware: no principal on the request; it must run after the auth middleware")
		}
		body, err := httpx.ReadBody(c)
		if err != nil {
			return err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		fp := fingerprint(req.Method, req.URL.Path, body)

		cl, prev, err := s.claim(req.Context(), p.Scope(), key, fp)
		if flow == "" {
			flow = c.Path()
		}
		switch {
		case errors.Is(err, errKeyChurning):
			s.metrics.Stopped(flow, metrics.LayerIdempotency)
			return s.inProgress()
		case err != nil:
			return err
		}
		if cl == nil {
			s.counters.repeat(flow, prev.firstSeen, s.now())
			return s.refuse(c, flow, prev, fp)
		}
		if cl.takeover {
			s.counters.repeat(flow, cl.firstSeen, cl.at)
		}
		s.run(c, next, cl)
		return nil
	}
}

// refuse answers a request whose key is someone else's: another request's,
// a completed one's, or a still running one's.
func (s *Store) refuse(c echo.Context, flow string, prev *stored, fp []byte) error {
	s.metrics.Stopped(flow, metrics.LayerIdempotency)
	switch {
	case !bytes.Equal(prev.fingerprint, fp):
		s.counters.outcome(outcomeReused)
		return problem.New(problem.IdempotencyReused,
			"this Idempotency-Key was used for a different request (method, path or body); send a new key for a new request")
	case prev.response != nil:
		s.counters.outcome(outcomeReplayed)
		return replay(c, prev.response)
	default:
		return s.inProgress()
	}
}

// inProgress counts and answers a request whose key another request
// holds: 409 request_in_progress, to be retried after retryInProgress.
func (s *Store) inProgress() error {
	s.counters.outcome(outcomeInProgress)
	return &problem.Error{
		Code:       problem.RequestInProgress,
		Detail:     "a request with this Idempotency-Key is still being processed",
		RetryAfter: retryInProgress,
	}
}

// run runs the handler as the key's owner, then stores its answer or gives
// the key up. Errors are rendered here, so the answer stored is the problem
// document the client saw.
func (s *Store) run(c echo.Context, next echo.HandlerFunc, cl *claim) {
	if cl.takeover {
		s.counters.outcome(outcomeTakenOver)
		s.logger.InfoContext(c.Request().Context(), "idempotency key taken over after its lease ran out",
			"request_id", httpx.RequestID(c), "principal", cl.principal, "key", cl.key)
	} else {
		s.counters.outcome(outcomeClaimed)
	}

	res := c.Response()
	tee := &teeWriter{ResponseWriter: res.Writer}
	res.Writer = tee
	defer func() { res.Writer = tee.ResponseWriter }()

	// The handler must not outlive its claim: past the lease another
	// request may take the key over and run the same work.
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.lease)
	defer cancel()
	c.SetRequest(c.Request().WithContext(ctx))

	done := false
	defer func() {
		if !done { // the handler panicked: free the key, let Recover answer
			s.release(c, cl, "panic")
		}
	}()
	err := next(c)
	halfWritten := err != nil && res.Committed
	if err != nil {
		c.Error(err)
	}
	done = true

	switch {
	case halfWritten:
		s.release(c, cl, "the handler failed after it started answering")
	case tee.overflow:
		s.release(c, cl, "the answer is too large to store")
	case !storable(res.Status, err):
		s.release(c, cl, "")
	default:
		s.complete(c, cl, &response{status: res.Status, headers: keptHeaders(res.Header()), body: tee.buf.Bytes()})
	}
}

// storable reports whether an answer may be replayed for the key. A 5xx,
// a 429 and a refusal with Retry-After mean "not done, try again"; storing
// them would make a passing failure permanent for the key.
func storable(status int, err error) bool {
	return status < http.StatusInternalServerError &&
		status != http.StatusTooManyRequests &&
		!problem.Transient(err)
}

// complete stores the answer.
func (s *Store) complete(c echo.Context, cl *claim, r *response) {
	s.finish(c, cl, resultStored, func(ctx context.Context) (bool, error) { return s.completeClaim(ctx, cl, r) })
}

// release frees the key so that a retry runs the request again.
func (s *Store) release(c echo.Context, cl *claim, why string) {
	if why != "" {
		s.logger.WarnContext(c.Request().Context(), "idempotency key released", "request_id", httpx.RequestID(c), "key", cl.key, "why", why)
	}
	s.finish(c, cl, resultReleased, func(ctx context.Context) (bool, error) { return s.releaseClaim(ctx, cl) })
}

// finish runs op, the completion or the release of cl's key, on a context
// detached from the request (a client that hung up must not leave its key
// claimed) and bounded by FinishTimeout, since the answer waits for it.
//
// If op fails (the database slow, its pool exhausted, a connection cut),
// the answer goes out without it, and op is tried once more in the
// background within FinishRetryTimeout. Otherwise the key would stay
// claimed until its lease ends (30 s), and every retry of the request
// until then would be told request_in_progress. The late try is fenced by
// the owner token like the first: if the key was taken over meanwhile, it
// changes nothing.
func (s *Store) finish(c echo.Context, cl *claim, result string, op func(context.Context) (bool, error)) {
	detached := context.WithoutCancel(c.Request().Context())
	requestID := httpx.RequestID(c) // c is not to be used once the handler has returned
	ctx, cancel := context.WithTimeout(detached, s.finishTimeout)
	ok, err := op(ctx)
	cancel()
	if err == nil {
		s.finished(detached, requestID, cl, ok, nil, result)
		return
	}
	s.logger.WarnContext(detached, "idempotency key not finished; trying again after the answer",
		"request_id", requestID, "key", cl.key, "err", err)
	s.secondTries.Go(func() {
		ctx, cancel := context.WithTimeout(detached, FinishRetryTimeout)
		defer cancel()
		ok, err := op(ctx)
		s.finished(ctx, requestID, cl, ok, err, result)
	})
}

// Wait returns when every second try of a completion or release has ended,
// each within FinishRetryTimeout. A replica that stops calls it after its
// server has drained and before it closes the store's pool, so that a key
// whose first try failed is not left claimed for the rest of its lease.
func (s *Store) Wait() { s.secondTries.Wait() }

// finished records what became of a claim after the handler ran.
func (s *Store) finished(ctx context.Context, requestID string, cl *claim, ok bool, err error, result string) {
	switch {
	case err != nil:
		// The answer has been sent; the key frees itself when the lease ends.
		s.counters.result(resultError)
		s.logger.ErrorContext(ctx, "idempotency key left claimed", "request_id", requestID, "key", cl.key, "err", err)
	case !ok:
		s.counters.result(resultStaleOwner)
		// Taken over after the lease ran out; or, on a second try, the
		// first one had committed and only its reply was lost.
		s.logger.WarnContext(ctx, "idempotency key no longer held by this request when it finished (taken over after its lease, or finished by an earlier try)",
			"request_id", requestID, "key", cl.key)
	default:
		s.counters.result(result)
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

// KeyFrom returns the request's idempotency key: exactly one header of
// 1–255 printable ASCII characters (0x20–0x7E), the same rule as the
// table's CHECK constraint idempotency_keys_key_format. The payment
// gateway applies the same rule to its own keys.
func KeyFrom(h http.Header) (string, error) {
	values := h.Values(HeaderKey)
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

// maxStoredBody bounds the answer kept in memory for storing. The routes
// that take a key answer with one resource; a larger answer is still sent,
// but not stored (the key is released).
const maxStoredBody = 1 << 20

// teeWriter copies what the handler writes into buf on its way to the
// client. It keeps every byte the handler wrote even if the client has
// gone: the answer stored is the one the handler gave.
type teeWriter struct {
	http.ResponseWriter
	buf      bytes.Buffer
	overflow bool
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if !w.overflow {
		if w.buf.Len()+len(p) > maxStoredBody {
			w.overflow = true
			w.buf = bytes.Buffer{}
		} else {
			w.buf.Write(p)
		}
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer (for
// Flush, deadlines), as echo's Response does.
func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
