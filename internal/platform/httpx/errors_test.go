package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

// apiStatuses is API.md's "Errors" table, copied by hand: the contract
// clients rely on, which the statuses table must not drift from.
var apiStatuses = []struct {
	code   problem.Code
	status int
}{
	{problem.Invalid, 400},
	{problem.IdempotencyRequired, 400},
	{problem.Unauthenticated, 401},
	{problem.Forbidden, 403},
	{problem.NotFound, 404},
	{problem.OutOfStock, 409},
	{problem.InvalidState, 409},
	{problem.SeatUnavailable, 409},
	{problem.HoldLimitReached, 409},
	{problem.HoldExpired, 409},
	{problem.RequestInProgress, 409},
	{problem.ResourceBusy, 409},
	{problem.PaymentDeclined, 402},
	{problem.VersionMismatch, 412},
	{problem.PayloadTooLarge, 413},
	{problem.IdempotencyReused, 422},
	{problem.RefundExceedsRemaining, 422},
	{problem.RateLimited, 429},
	{problem.Unavailable, 503},
	// Not in the table but named elsewhere in API.md (405 from the router,
	// 428 for a PATCH without If-Match) or used by the stores.
	{problem.MethodNotAllowed, 405},
	{problem.PreconditionRequired, 428},
	{problem.AlreadyExists, 409},
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// render runs the error handler on err for a request with the given method
// and returns what the client got.
func render(t *testing.T, logger *slog.Logger, method string, err error) *httptest.ResponseRecorder {
	t.Helper()
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(method, "/v1/things", nil), rec)
	ErrorHandler(logger)(err, c)
	return rec
}

// problemDoc decodes a problem+json body, failing on anything else.
func problemDoc(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if got := rec.Header().Get(echo.HeaderContentType); got != ProblemContentType {
		t.Errorf("Content-Type = %q, want %q", got, ProblemContentType)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body.String(), err)
	}
	return doc
}

func TestStatus(t *testing.T) {
	for _, tt := range apiStatuses {
		if got := Status(tt.code); got != tt.status {
			t.Errorf("Status(%s) = %d, want %d", tt.code, got, tt.status)
		}
	}
	if got := Status("no_such_code"); got != http.StatusInternalServerError {
		t.Errorf("Status(unknown) = %d, want 500", got)
	}
	// Every code the table knows is in the contract above.
	for code := range statuses {
		found := false
		for _, tt := range apiStatuses {
			found = found || tt.code == code
		}
		if !found {
			t.Errorf("code %s is mapped but not in API.md's table: add it to the contract", code)
		}
	}
}

func TestErrorHandler_Codes(t *testing.T) {
	for _, tt := range apiStatuses {
		t.Run(string(tt.code), func(t *testing.T) {
			detail := "detail of " + string(tt.code)
			rec := render(t, discardLogger(), http.MethodGet, fmt.Errorf("wrapped: %w", problem.New(tt.code, detail)))
			if rec.Code != tt.status {
				t.Errorf("status = %d, want %d", rec.Code, tt.status)
			}
			doc := problemDoc(t, rec)
			wantType := "https://shop.example/problems/" + strings.ReplaceAll(string(tt.code), "_", "-")
			if doc["type"] != wantType {
				t.Errorf("type = %v, want %s", doc["type"], wantType)
			}
			if title, _ := doc["title"].(string); title == "" || title == "Internal error" {
				t.Errorf("title = %v, want the code's title", doc["title"])
			}
			if doc["status"] != float64(tt.status) {
				t.Errorf("status member = %v, want %d", doc["status"], tt.status)
			}
			if doc["code"] != string(tt.code) {
				t.Errorf("code = %v, want %s", doc["code"], tt.code)
			}
			if doc["detail"] != detail {
				t.Errorf("detail = %v, want %q", doc["detail"], detail)
			}
			if got := rec.Header().Get("Retry-After"); got != "" {
				t.Errorf("Retry-After = %q without RetryAfter set, want none", got)
			}
		})
	}
}

func TestErrorHandler_Title(t *testing.T) {
	rec := render(t, discardLogger(), http.MethodGet, problem.New(problem.OutOfStock, "SKU-1: 0 available, 2 requested"))
	doc := problemDoc(t, rec)
	want := map[string]any{
		"type":   "https://shop.example/problems/out-of-stock",
		"title":  "Out of stock",
		"status": float64(409),
		"code":   "out_of_stock",
		"detail": "SKU-1: 0 available, 2 requested",
	}
	if len(doc) != len(want) {
		t.Errorf("document = %v, want exactly %v", doc, want)
	}
	for k, v := range want {
		if doc[k] != v {
			t.Errorf("%s = %v, want %v", k, doc[k], v)
		}
	}
}

func TestErrorHandler_NoDetail(t *testing.T) {
	doc := problemDoc(t, render(t, discardLogger(), http.MethodGet, &problem.Error{Code: problem.NotFound}))
	if _, ok := doc["detail"]; ok {
		t.Errorf("detail = %v, want the member left out when empty", doc["detail"])
	}
}

func TestErrorHandler_RetryAfter(t *testing.T) {
	tests := []struct {
		after time.Duration
		want  string
	}{
		{time.Millisecond, "1"},
		{999 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1001 * time.Millisecond, "2"},
		{1500 * time.Millisecond, "2"},
		{2 * time.Second, "2"},
		{90 * time.Second, "90"},
	}
	for _, tt := range tests {
		t.Run(tt.after.String(), func(t *testing.T) {
			err := &problem.Error{Code: problem.RateLimited, Detail: "slow down", RetryAfter: tt.after}
			rec := render(t, discardLogger(), http.MethodGet, err)
			if got := rec.Header().Get("Retry-After"); got != tt.want {
				t.Errorf("Retry-After = %q, want %q", got, tt.want)
			}
			if rec.Code != http.StatusTooManyRequests {
				t.Errorf("status = %d, want 429", rec.Code)
			}
		})
	}
}

func TestErrorHandler_Extra(t *testing.T) {
	err := &problem.Error{
		Code:   problem.SeatUnavailable,
		Detail: "2 seats are taken",
		Extra:  map[string]any{"seats": []string{"A1", "A2"}},
	}
	doc := problemDoc(t, render(t, discardLogger(), http.MethodPost, err))
	seats, ok := doc["seats"].([]any)
	if !ok || len(seats) != 2 || seats[0] != "A1" || seats[1] != "A2" {
		t.Errorf("seats = %v, want [A1 A2]", doc["seats"])
	}
	if doc["code"] != "seat_unavailable" || doc["detail"] != "2 seats are taken" {
		t.Errorf("document = %v, want the code and detail kept next to the extra member", doc)
	}
}

// An extra member cannot pass itself off as a standard one.
func TestErrorHandler_ExtraCannotOverwrite(t *testing.T) {
	err := &problem.Error{Code: problem.OutOfStock, Detail: "d",
		Extra: map[string]any{"status": 200, "code": "ok", "type": "x", "title": "t", "detail": "other"}}
	doc := problemDoc(t, render(t, discardLogger(), http.MethodPost, err))
	if doc["status"] != float64(409) || doc["code"] != "out_of_stock" || doc["detail"] != "d" || doc["title"] != "Out of stock" {
		t.Errorf("document = %v, want the standard members kept", doc)
	}
}

func TestErrorHandler_Internal(t *testing.T) {
	const secret = "pq: password authentication failed for user shop at 10.0.0.7"
	tests := []struct {
		name string
		err  error
	}{
		{"PlainError", errors.New(secret)},
		{"WrappedError", fmt.Errorf("insert order: %w", errors.New(secret))},
		// A refusal with a code the table does not know is a programming
		// error: it must not pass its detail through.
		{"UnknownCode", problem.New("made_up", secret)},
		{"EchoTeapot", echo.NewHTTPError(http.StatusTeapot, secret)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, nil))
			rec := render(t, logger, http.MethodGet, tt.err)
			if rec.Code != http.StatusInternalServerError {
				t.Errorf("status = %d, want 500", rec.Code)
			}
			doc := problemDoc(t, rec)
			if doc["code"] != "internal" {
				t.Errorf("code = %v, want internal", doc["code"])
			}
			if doc["status"] != float64(500) {
				t.Errorf("status member = %v, want 500", doc["status"])
			}
			if doc["title"] != "Internal error" {
				t.Errorf("title = %v, want Internal error", doc["title"])
			}
			for _, leak := range []string{"password", "10.0.0.7", "insert order", "made_up"} {
				if strings.Contains(rec.Body.String(), leak) {
					t.Errorf("body %q reveals %q", rec.Body.String(), leak)
				}
			}
			// The operator still gets the whole error, in the log.
			if !strings.Contains(logs.String(), "10.0.0.7") {
				t.Errorf("log %q does not carry the error", logs.String())
			}
		})
	}
}

// A refusal (4xx) is the client's business, not an operator's: not logged
// as a failure.
func TestErrorHandler_RefusalNotLogged(t *testing.T) {
	var logs bytes.Buffer
	render(t, slog.New(slog.NewJSONHandler(&logs, nil)), http.MethodGet, problem.New(problem.NotFound, "no such order"))
	if logs.Len() != 0 {
		t.Errorf("log = %q, want nothing for a 404", logs.String())
	}
}

func TestErrorHandler_EchoErrors(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"NotFound", echo.ErrNotFound, 404, "not_found"},
		{"MethodNotAllowed", echo.ErrMethodNotAllowed, 405, "method_not_allowed"},
		{"PayloadTooLarge", echo.ErrStatusRequestEntityTooLarge, 413, "payload_too_large"},
		{"ServiceUnavailable", echo.ErrServiceUnavailable, 503, "unavailable"},
		{"BadRequest", echo.NewHTTPError(http.StatusBadRequest, "code=400, internal parser state"), 400, "invalid_request"},
		{"DeadlineExceeded", context.DeadlineExceeded, 503, "unavailable"},
		{"WrappedDeadlineExceeded", fmt.Errorf("query stock: %w", context.DeadlineExceeded), 503, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := render(t, discardLogger(), http.MethodGet, tt.err)
			if rec.Code != tt.status {
				t.Errorf("status = %d, want %d", rec.Code, tt.status)
			}
			doc := problemDoc(t, rec)
			if doc["code"] != tt.code {
				t.Errorf("code = %v, want %s", doc["code"], tt.code)
			}
			if strings.Contains(rec.Body.String(), "parser state") || strings.Contains(rec.Body.String(), "query stock") {
				t.Errorf("body %q reveals the internal message", rec.Body.String())
			}
			wantRetry := ""
			if tt.status == http.StatusServiceUnavailable {
				wantRetry = "2"
			}
			if got := rec.Header().Get("Retry-After"); got != wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, wantRetry)
			}
		})
	}
}

func TestErrorHandler_Head(t *testing.T) {
	for _, err := range []error{problem.New(problem.NotFound, "no such product"), errors.New("boom")} {
		rec := render(t, discardLogger(), http.MethodHead, err)
		if rec.Code != Status(problem.CodeOf(err)) {
			t.Errorf("HEAD %v: status = %d, want %d", err, rec.Code, Status(problem.CodeOf(err)))
		}
		if rec.Body.Len() != 0 {
			t.Errorf("HEAD %v: body = %q, want none", err, rec.Body.String())
		}
		if got := rec.Header().Get(echo.HeaderContentType); got != ProblemContentType {
			t.Errorf("HEAD %v: Content-Type = %q, want %q", err, got, ProblemContentType)
		}
	}
}

// Once the handler has started its answer, an error cannot replace it.
func TestErrorHandler_Committed(t *testing.T) {
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	if err := c.String(http.StatusOK, "partial"); err != nil {
		t.Fatal(err)
	}
	ErrorHandler(discardLogger())(errors.New("late failure"), c)
	if rec.Code != http.StatusOK || rec.Body.String() != "partial" {
		t.Errorf("response = %d %q, want the handler's 200 partial untouched", rec.Code, rec.Body.String())
	}
}

// A 401 says how to authenticate (RFC 9110 §11.6.1); a challenge set
// before the error (with RFC 6750's error parameter) is kept.
func TestErrorHandler_Challenge(t *testing.T) {
	rec := render(t, discardLogger(), http.MethodGet, problem.New(problem.Unauthenticated, "no token"))
	if got := rec.Header().Get("WWW-Authenticate"); got != `Bearer realm="shop"` {
		t.Errorf(`WWW-Authenticate = %q, want Bearer realm="shop"`, got)
	}
	rec = render(t, discardLogger(), http.MethodGet, problem.New(problem.Forbidden, "not yours"))
	if got := rec.Header().Get("WWW-Authenticate"); got != "" {
		t.Errorf("WWW-Authenticate = %q on a 403, want none", got)
	}

	e := echo.New()
	rec = httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/v1/things", nil), rec)
	const precise = `Bearer realm="shop", error="invalid_token"`
	c.Response().Header().Set("WWW-Authenticate", precise)
	ErrorHandler(discardLogger())(problem.New(problem.Unauthenticated, "unknown token"), c)
	if got := rec.Header().Get("WWW-Authenticate"); got != precise {
		t.Errorf("WWW-Authenticate = %q, want the one set before: %q", got, precise)
	}
}

// A database that cannot serve (refusing connections, full, shutting
// down) is a dependency down: 503 unavailable with Retry-After, logged for
// the operator, its message kept from the client. It once answered 500.
func TestErrorHandler_DatabaseUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"TooManyConnections", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}},
		{"AdminShutdown", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}},
		{"CannotConnectNow", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}},
		{"ConnectionFailure", &pgconn.PgError{Code: "08006", Message: "connection failure"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			rec := render(t, slog.New(slog.NewJSONHandler(&logs, nil)), http.MethodGet, fmt.Errorf("look up token: %w", tt.err))
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("status = %d, want 503", rec.Code)
			}
			doc := problemDoc(t, rec)
			if doc["code"] != "unavailable" {
				t.Errorf("code = %v, want unavailable", doc["code"])
			}
			if got := rec.Header().Get("Retry-After"); got != "2" {
				t.Errorf("Retry-After = %q, want 2", got)
			}
			if strings.Contains(rec.Body.String(), "look up token") || strings.Contains(rec.Body.String(), tt.err.(*pgconn.PgError).Message) {
				t.Errorf("body %q reveals the error", rec.Body.String())
			}
			if !strings.Contains(logs.String(), "look up token") {
				t.Errorf("log %q does not carry the error", logs.String())
			}
		})
	}
	// Other database errors are still internal errors.
	rec := render(t, discardLogger(), http.MethodGet, fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505"}))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("unique violation: status = %d, want 500", rec.Code)
	}
}
