package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// Atomic is the middleware for a route whose flow writes its idempotency
// record in its own transaction(s) (the atomic phases of
// brandur/rocket-rides-atomic). Before the handler it touches no database:
// it checks the Idempotency-Key header (KeyFrom), reads and fingerprints
// the body, and puts a *Record on the request's context. After the
// handler, if the flow did not complete the record in its transaction and
// the answer is storable (a 4xx that answers the request, e.g. 400
// invalid_request, 409 out_of_stock), it stores that answer in one
// statement of its own (taking the key's advisory lock first, so it never
// overwrites a record another request of the key is writing). Refusals
// returned by Claim are answered here: a replay (byte for byte,
// Idempotent-Replayed: true), 409 request_in_progress with Retry-After,
// 422 idempotency_key_reused.
//
// It must run after the auth middleware: keys are scoped by
// auth.PrincipalFrom(ctx).Scope(). Conflicts it stops are counted under
// flow, the name the domain service uses for the same flow, so one flow's
// conflicts read as one series whichever layer stopped them.
//
//	g.POST("/orders", h.create, authMW.User, idem.Atomic("create_order"))
func (s *Store) Atomic(flow string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
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
			owner, err := uuid.NewRandom()
			if err != nil {
				return fmt.Errorf("new owner token: %w", err)
			}
			// The request's idempotency span: what its claim met, and what
			// became of its answer.
			ctx, span := tracing.Start(req.Context(), "idempotency "+flow, attrFlow.String(flow), attrKey.String(key))
			req = req.WithContext(ctx)
			c.SetRequest(req)
			rec := &Record{store: s, flow: flow, principal: p.Scope(), key: key,
				names: s.scheme.Record(flow, key),
				fp:    fingerprint(req.Method, req.URL.Path, body), owner: owner,
				// PostgreSQL keeps microseconds; truncating makes the
				// created_at read back comparable with at.
				at: s.now().UTC().Truncate(time.Microsecond)}
			defer func() {
				if span.IsRecording() {
					span.SetAttributes(rec.spanAttributes()...)
				}
				span.End()
			}()
			return s.runAtomic(c, next, rec)
		}
	}
}

// runAtomic runs the handler with rec on its context, holding back its
// answer until it is known to be the key's answer.
func (s *Store) runAtomic(c echo.Context, next echo.HandlerFunc, rec *Record) error {
	// The handler must not outlive its claim: past the lease another
	// request may take the key over and run the same work.
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.lease)
	defer cancel()
	c.SetRequest(c.Request().WithContext(context.WithValue(ctx, recordKey{}, rec)))

	res := c.Response()
	// Headers set before this middleware (the request id) stay on the
	// real response; the held one starts from a copy.
	held := &heldWriter{ResponseWriter: res.Writer, header: res.Header().Clone()}
	res.Writer = held
	done := false
	defer func() {
		res.Writer = held.ResponseWriter
		if !done {
			// The handler panicked. Its transaction rolled back; a claim
			// a committed phase left is freed, and Recover answers on a
			// response that has not been written.
			unwrite(res)
			if rec.claimed {
				s.free(c, rec, "panic")
			}
		}
	}()
	err := next(c)
	var refusal *Refusal
	if errors.As(err, &refusal) {
		done = true
		res.Writer = held.ResponseWriter
		unwrite(res)
		return s.answerRefusal(c, rec.flow, refusal.prev, rec.fp)
	}
	if err != nil && httpx.StatusOf(err) >= http.StatusInternalServerError {
		// A failure is never the key's answer: it goes to the edge as the
		// handler returned it, so that the edge logs and counts it as it
		// does on any route (499 at INFO when the client had gone, 500 at
		// ERROR otherwise). A claim a committed phase left is freed.
		done = true
		res.Writer = held.ResponseWriter
		s.freeOrRelease(c, rec)
		unwrite(res)
		return err
	}
	if err != nil {
		c.Error(err) // rendered into the held answer, which may be stored
	}
	done = true
	res.Writer = held.ResponseWriter

	switch {
	case err == nil && rec.answer != nil:
		// The flow stored its answer in its committed transaction.
		s.result(rec, resultStored)
		return held.flush(res)
	case !storable(res.Status, err) || held.buf.Len() > maxStoredBody:
		s.freeOrRelease(c, rec)
		return held.flush(res)
	}
	resp := &response{status: res.Status, headers: keptHeaders(held.header), body: held.buf.Bytes()}
	prev, stored, err := s.storeAnswer(c, rec, resp)
	switch {
	case err != nil:
		// The answer could not be recorded (the database unreachable, or
		// failing over to its standby), so it is not sent: a retry with
		// the key would not get it back, and the client must be able to
		// trust that it would. The client is told to try again instead.
		// Nothing this answer reports was committed (a flow that commits
		// stores its answer in its own transaction), and a claim a
		// committed phase left is freed, so the retry runs the flow
		// again, whose own layers make it safe.
		s.result(rec, resultError)
		s.logger.ErrorContext(c.Request().Context(), "idempotency answer not stored; answered 503",
			"request_id", httpx.RequestID(c), "key", rec.key, "status", resp.status, "err", err)
		if rec.claimed {
			s.free(c, rec, "")
		}
		unwrite(res)
		return &problem.Error{Code: problem.Unavailable, RetryAfter: time.Second,
			Detail: "the answer could not be recorded; send the request again with the same Idempotency-Key"}
	case stored:
		if !rec.claimed {
			s.outcome(rec, outcomeClaimed) // claimed and completed in that one statement
		}
		s.result(rec, resultStored)
		return held.flush(res)
	}
	// Another request holds the key or completed it since: the key's
	// answer is its, not this one's.
	s.result(rec, resultStaleOwner)
	unwrite(res)
	return s.answerRefusal(c, rec.flow, prev, rec.fp)
}

// freeOrRelease lets go of rec's key after an answer that is not stored.
// A phase that committed may have left the claim: it is freed, so a retry
// runs again at once. Fenced by the owner token; a rolled-back claim or a
// completed key matches no row.
func (s *Store) freeOrRelease(c echo.Context, rec *Record) {
	if rec.claimed {
		s.free(c, rec, "")
		return
	}
	s.result(rec, resultReleased)
}

// answerRefusal answers a request whose key is not its own: prev is the
// row that refused it, nil when another request of the key is running.
func (s *Store) answerRefusal(c echo.Context, flow string, prev *stored, fp []byte) error {
	if prev == nil {
		s.metrics.Stopped(flow, layers.Idempotency.String())
		tracing.Stopped(c.Request().Context(), layers.Idempotency.String())
		return s.inProgress(RecordFrom(c.Request().Context()))
	}
	s.counters.repeat(flow, prev.firstSeen, s.now())
	return s.refuse(c, flow, prev, fp)
}

// free deletes a claim of rec's that a committed phase may have left, so
// that a retry runs at once instead of waiting for the lease. Whether a
// row was there is no news: a one-transaction flow's claim rolled back
// with it. The delete runs on a context detached from the request (a
// client that hung up must not leave its key claimed) and bounded by
// FinishTimeout, since the answer waits for it.
//
// If it fails (the database slow, its pool exhausted, a connection cut),
// the answer goes out without it, and it is tried once more in the
// background within FinishRetryTimeout; otherwise every retry of the
// request would be told request_in_progress until the lease ends (30 s).
// The late try is fenced by the owner token like the first: if the key
// was taken over or completed meanwhile, it deletes nothing.
func (s *Store) free(c echo.Context, rec *Record, why string) {
	detached := context.WithoutCancel(c.Request().Context())
	requestID := httpx.RequestID(c) // c is not to be used once the handler has returned
	principal, key, name, owner := rec.principal, rec.key, rec.name, rec.owner
	if why != "" {
		s.logger.WarnContext(detached, "idempotency key released", "request_id", requestID, "key", key, "why", why)
	}
	release := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(detached, timeout)
		defer cancel()
		return s.release(ctx, principal, name, owner)
	}
	err := release(s.finishTimeout)
	if err == nil {
		s.result(nil, resultReleased)
		return
	}
	s.logger.WarnContext(detached, "idempotency key not released; trying again after the answer",
		"request_id", requestID, "key", key, "err", err)
	s.secondTries.Go(func() {
		if err := release(FinishRetryTimeout); err != nil {
			// The answer has been sent; the key frees itself when the lease ends.
			s.result(nil, resultError)
			s.logger.ErrorContext(detached, "idempotency key left claimed", "request_id", requestID, "key", key, "err", err)
			return
		}
		s.result(nil, resultReleased)
	})
}

// Wait returns when every second try of a release has ended, each within
// FinishRetryTimeout. A replica that stops calls it after its server has
// drained and before it closes the store's pool, so that a key whose first
// release failed is not left claimed for the rest of its lease.
func (s *Store) Wait() { s.secondTries.Wait() }

// storeAnswer stores resp as the answer of rec's key, unless another
// request holds the key or completed it: then it returns the row that
// stopped it (nil if the other request is still running).
func (s *Store) storeAnswer(c echo.Context, rec *Record, resp *response) (*stored, bool, error) {
	headers, err := json.Marshal(resp.headers)
	if err != nil {
		return nil, false, fmt.Errorf("encode headers: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), s.finishTimeout)
	defer cancel()
	now := s.now().UTC().Truncate(time.Microsecond)
	names := rec.names
	query, keyLock := sqlStoreAnswer, sqlKeyLock
	if rec.claimed {
		query, keyLock = sqlStoreOwnAnswer, sqlKeyWaitLock
	}
	args := []any{rec.principal, names.Lock, rec.fp, rec.owner, rec.at, rec.at,
		names.Write, names.Other, names.Scheme, resp.status, headers, resp.body, now}
	var held, stored bool
	if names.Other == "" {
		err = s.db.QueryRow(ctx, query, args...).Scan(&held, &stored)
	} else {
		// The key may have the other name: read it under the key's lock,
		// as a claim does (sqlKeyLock). A claim of this request's that
		// rolled back may have been made meanwhile under the other name by
		// a copy on another replica; then that copy's record is the key's.
		err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, keyLock, rec.principal, names.Lock).Scan(&held); err != nil || !held {
				return err
			}
			return tx.QueryRow(ctx, query, args...).Scan(&held, &stored)
		})
	}
	if err != nil {
		return nil, false, fmt.Errorf("store idempotency answer %q: %w", rec.key, err)
	}
	if !held || stored {
		return nil, stored, nil
	}
	prev, err := s.readKey(ctx, rec.principal, names)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil // gone again already: as busy as a key in progress
	}
	if err == nil && prev.scheme != s.scheme.Version && !rec.crossed {
		rec.crossed = true
		s.counters.crossScheme(rec.flow, prev.scheme)
	}
	return prev, false, err
}

// heldWriter holds the handler's answer back until the middleware knows
// it is the key's answer: it is sent as it is, or replaced by the key's.
type heldWriter struct {
	http.ResponseWriter
	header http.Header
	status int
	buf    bytes.Buffer
}

func (w *heldWriter) Header() http.Header { return w.header }

func (w *heldWriter) WriteHeader(status int) { w.status = status }

func (w *heldWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }

// Flush holds too: the answer goes out whole, at the end.
func (w *heldWriter) Flush() {}

// flush sends the held answer on res, whose writer is the real one again.
func (w *heldWriter) flush(res *echo.Response) error {
	if w.status == 0 {
		return nil // the handler answered nothing; echo's defaults apply
	}
	h := res.Header()
	for k := range h {
		if _, ok := w.header[k]; !ok {
			delete(h, k)
		}
	}
	for k, v := range w.header {
		h[k] = v
	}
	res.Writer.WriteHeader(w.status)
	if _, err := res.Writer.Write(w.buf.Bytes()); err != nil {
		return fmt.Errorf("send answer: %w", err)
	}
	return nil
}

// unwrite makes res unwritten again, so that another answer can be
// written: nothing of the held one reached the client.
func unwrite(res *echo.Response) {
	res.Committed, res.Status, res.Size = false, 0, 0
}
