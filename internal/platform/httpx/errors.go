package httpx

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// ProblemContentType is the media type of every error body (RFC 9457).
const ProblemContentType = "application/problem+json"

const problemTypeBase = "https://shop.example/problems/"

// BearerChallenge is the WWW-Authenticate of a 401: the API takes bearer
// tokens (RFC 6750 §3).
const BearerChallenge = `Bearer realm="shop"`

// statuses is the one table that turns a problem code into an HTTP status
// and a title. Domain packages only ever speak in codes.
var statuses = map[problem.Code]struct {
	status int
	title  string
}{
	problem.Invalid:                {http.StatusBadRequest, "Invalid request"},
	problem.MethodNotAllowed:       {http.StatusMethodNotAllowed, "Method not allowed"},
	problem.IdempotencyRequired:    {http.StatusBadRequest, "Idempotency key required"},
	problem.Unauthenticated:        {http.StatusUnauthorized, "Unauthenticated"},
	problem.Forbidden:              {http.StatusForbidden, "Forbidden"},
	problem.NotFound:               {http.StatusNotFound, "Not found"},
	problem.AlreadyExists:          {http.StatusConflict, "Already exists"},
	problem.OutOfStock:             {http.StatusConflict, "Out of stock"},
	problem.InvalidState:           {http.StatusConflict, "Invalid state"},
	problem.SeatUnavailable:        {http.StatusConflict, "Seat unavailable"},
	problem.HoldLimitReached:       {http.StatusConflict, "Hold limit reached"},
	problem.HoldExpired:            {http.StatusConflict, "Hold expired"},
	problem.RequestInProgress:      {http.StatusConflict, "Request in progress"},
	problem.ResourceBusy:           {http.StatusConflict, "Resource busy"},
	problem.PaymentDeclined:        {http.StatusPaymentRequired, "Payment declined"},
	problem.VersionMismatch:        {http.StatusPreconditionFailed, "Version mismatch"},
	problem.PreconditionRequired:   {http.StatusPreconditionRequired, "Precondition required"},
	problem.PayloadTooLarge:        {http.StatusRequestEntityTooLarge, "Payload too large"},
	problem.IdempotencyReused:      {http.StatusUnprocessableEntity, "Idempotency key reused"},
	problem.RefundExceedsRemaining: {http.StatusUnprocessableEntity, "Refund exceeds remaining"},
	problem.RateLimited:            {http.StatusTooManyRequests, "Rate limited"},
	problem.Unavailable:            {http.StatusServiceUnavailable, "Service unavailable"},
}

// Status returns the HTTP status for a problem code (500 for an unknown one).
func Status(code problem.Code) int {
	if s, ok := statuses[code]; ok {
		return s.status
	}
	return http.StatusInternalServerError
}

// StatusOf returns the HTTP status the error handler answers err with.
func StatusOf(err error) int { return Status(toProblem(err).Code) }

// Document is the JSON body of an error response.
type Document map[string]any

// ErrorHandler renders every error a handler returns as problem+json.
// Refusals (*problem.Error) keep their code and detail; anything else is an
// internal error: logged with the request id, and answered with a generic
// 500 that reveals nothing.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := toProblem(err)
		status := Status(p.Code)
		if status >= 500 {
			logger.ErrorContext(c.Request().Context(), "request failed",
				"request_id", RequestID(c), "method", c.Request().Method,
				"path", c.Request().URL.Path, "err", err)
		}
		if p.RetryAfter > 0 {
			secs := int(math.Ceil(p.RetryAfter.Seconds()))
			c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
		}
		// A 401 must say how to authenticate (RFC 9110 §11.6.1); the
		// auth middleware may have set a more precise challenge already.
		if status == http.StatusUnauthorized && c.Response().Header().Get(echo.HeaderWWWAuthenticate) == "" {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, BearerChallenge)
		}
		// Extra members first, so none can overwrite a standard one.
		doc := make(Document, len(p.Extra)+5)
		for k, v := range p.Extra {
			doc[k] = v
		}
		doc["type"] = problemTypeBase + strings.ReplaceAll(string(p.Code), "_", "-")
		doc["title"] = statuses[p.Code].title
		doc["status"] = status
		doc["code"] = p.Code
		if status == http.StatusInternalServerError {
			doc["title"] = "Internal error"
			doc["code"] = "internal"
		}
		if p.Detail != "" {
			doc["detail"] = p.Detail
		}
		if id := tracing.TraceID(c.Request().Context()); id != "" {
			doc["trace_id"] = id
		}
		c.Response().Header().Set(echo.HeaderContentType, ProblemContentType)
		c.Response().WriteHeader(status)
		if c.Request().Method == http.MethodHead {
			return
		}
		_ = writeJSON(c.Response(), doc)
	}
}

// toProblem converts any error into the refusal the client will see.
func toProblem(err error) *problem.Error {
	if p, ok := problem.As(err); ok {
		if _, known := statuses[p.Code]; known {
			return p
		}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return problem.New(problem.NotFound, "no such resource")
		case http.StatusMethodNotAllowed:
			return problem.New(problem.MethodNotAllowed, "this resource does not answer that method")
		case http.StatusRequestEntityTooLarge:
			return problem.New(problem.PayloadTooLarge, "request body is larger than 64 KiB")
		case http.StatusServiceUnavailable:
			return &problem.Error{Code: problem.Unavailable, Detail: "the request timed out", RetryAfter: retryAfterUnavailable}
		case http.StatusBadRequest:
			return problem.New(problem.Invalid, "malformed request")
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &problem.Error{Code: problem.Unavailable, Detail: "the request timed out", RetryAfter: retryAfterUnavailable}
	}
	if postgres.Unavailable(err) {
		return &problem.Error{Code: problem.Unavailable, Detail: "the database is unavailable", RetryAfter: retryAfterUnavailable}
	}
	return &problem.Error{Code: "internal", Detail: "internal error"}
}
