package apptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/platform/contract"
)

// Response is what a request got back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Problem is an RFC 9457 error body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// TraceID is the trace that decided the answer, with tracing on.
	TraceID string `json:"trace_id"`
}

// Problem decodes the error body; the zero value if it is not one.
func (r Response) Problem() Problem {
	var p Problem
	_ = json.Unmarshal(r.Body, &p)
	return p
}

// Code is the problem code of an error answer.
func (r Response) Code() string { return r.Problem().Code }

func (r Response) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// Do sends a request to the replica. token, if set, goes in a bearer
// Authorization header; header holds more name/value pairs. body is sent
// as is when it is []byte, string or io.Reader (a reader is sent chunked,
// without Content-Length), JSON-encoded otherwise, and not at all when nil.
//
// Every error answer is checked against the problem+json contract on the
// way. Do is safe to call from goroutines: a request that fails is reported
// with t.Errorf and comes back with Status 0.
func (r *Replica) Do(t testing.TB, method, path, token string, body any, header ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Errorf("encode body: %v", err)
			return Response{}
		}
		rd = bytes.NewReader(enc)
	}
	ctx := contract.WithReporter(context.Background(), t)
	if r.breach != "" {
		ctx = contract.OffContract(ctx, r.breach)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.URL+path, rd)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return Response{}
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if len(header)%2 != 0 {
		t.Errorf("do: header pairs: odd count %d", len(header))
		return Response{}
	}
	for i := 0; i < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := r.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return Response{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", method, path, err)
		return Response{}
	}
	out := Response{Status: res.StatusCode, Header: res.Header, Body: b}
	if out.Status >= 400 {
		CheckProblem(t, method+" "+path, out)
	}
	checkHeaders(t, method+" "+path, out)
	return out
}

// checkHeaders checks the headers API.md promises on every answer:
// nosniff everywhere, no-store on the API, a Location on every 201.
func checkHeaders(t testing.TB, what string, r Response) {
	t.Helper()
	if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: %d answered with X-Content-Type-Options %q, want nosniff", what, r.Status, got)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("%s: %d answered with Cache-Control %q, want no-store", what, r.Status, got)
	}
	if r.Status == http.StatusCreated && r.Header.Get("Location") == "" {
		t.Errorf("%s: 201 without a Location", what)
	}
}

// retryAfterCodes are the codes whose answers must carry Retry-After.
var retryAfterCodes = map[string]bool{
	"request_in_progress": true, "resource_busy": true, "rate_limited": true, "unavailable": true,
}

// CheckProblem checks an error answer against API.md, "Errors": an
// application/problem+json body with type, title, status and a code, and
// Retry-After where the code promises one.
func CheckProblem(t testing.TB, what string, r Response) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: %d answered with Content-Type %q, want application/problem+json", what, r.Status, ct)
	}
	var p Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Errorf("%s: %d body is not a problem document: %v: %s", what, r.Status, err, r.Body)
		return
	}
	if p.Code == "" || p.Type == "" || p.Title == "" || p.Status != r.Status {
		t.Errorf("%s: problem document lacks code, type, title or the right status (%d): %s", what, r.Status, r.Body)
	}
	if retryAfterCodes[p.Code] {
		if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
			t.Errorf("%s: %s without a Retry-After of whole seconds (got %q)", what, p.Code, r.Header.Get("Retry-After"))
		}
	}
}

// WantStatus fails the test unless r has the status.
func WantStatus(t testing.TB, r Response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %s, want %d", r, status)
	}
}

// WantProblem fails the test unless r is an error answer with the status
// and code.
func WantProblem(t testing.TB, r Response, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code() != code {
		t.Fatalf("got %s, want %d %s", r, status, code)
	}
}

// Decode decodes a JSON answer into a T.
func Decode[T any](t testing.TB, r Response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
	return v
}

// NewKey returns a fresh Idempotency-Key.
func NewKey() string { return rand.Text() }

// CheckedTransport sends through next and checks every request and answer
// against docs/openapi.yaml (package contract), failing the test that sent
// the request on a mismatch.
func CheckedTransport(t testing.TB, next http.RoundTripper) *contract.Transport {
	t.Helper()
	spec, err := contract.Load()
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	return &contract.Transport{Spec: spec, Next: next, Report: t}
}

// unchecked returns the transport a checked one sends through.
func unchecked(rt http.RoundTripper) http.RoundTripper {
	if c, ok := rt.(*contract.Transport); ok && c.Next != nil {
		return c.Next
	}
	return rt
}

// OffContract returns a copy of the replica whose requests break the API's
// contract on purpose, for the reason why (a hostile-input test sending
// invalid JSON, a missing header, an unknown route). Their answers are still
// checked against docs/openapi.yaml and must be 4xx refusals; a request so
// marked that the document admits fails the test, so marks stay narrow.
// An empty why is no mark: r itself, held to the contract (table tests mark
// only their hostile cases).
func (r *Replica) OffContract(why string) *Replica {
	if why == "" {
		return r
	}
	c := *r
	c.breach = why
	return &c
}

// LimitBreach is why a list query breaks docs/openapi.yaml: a limit out of
// 1–100 or no integer does; a cursor the service cannot read does not (the
// document says only that it is a string).
func LimitBreach(query string) string {
	if strings.HasPrefix(query, "limit=") {
		return "limit is no integer 1–100"
	}
	return ""
}
