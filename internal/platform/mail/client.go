// Package mail is the shop's client of its mail provider: one attempt per
// call, keyed by the caller (the event's consumer), never retried here.
// The provider's API is what `shop mailer` (harness/mailer), the stand-in
// the tests and the compose stack run, serves.
package mail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shop-example/shop/internal/platform/tracing"
)

// The kinds of message the shop sends.
const (
	KindReceipt = "receipt" // an order was paid
	KindTicket  = "ticket"  // seats were booked
	KindRefund  = "refund"  // money was given back
)

// Kinds are the kinds of message, as the provider names them in its
// refusal of another.
var Kinds = []string{KindReceipt, KindTicket, KindRefund}

// KnownKind reports whether k is one of Kinds.
func KnownKind(k string) bool { return slices.Contains(Kinds, k) }

// The headers of the idempotency contract, spelled as the shop spells them.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// Request is what is sent: the body of POST /v1/messages, and what an
// idempotency key is first used for. It is comparable, so "the same key
// with another request" is one !=.
type Request struct {
	Reference string `json:"reference"` // the order, booking or refund the message is about
	Kind      string `json:"kind"`      // one of Kinds
	To        string `json:"to"`
	Subject   string `json:"subject"`
	Text      string `json:"text"`
}

// The provider's bounds on a request, in characters (not bytes): POST
// /v1/messages refuses a field beyond its bound with 400, and no retry
// cures that. A message the shop builds from user data is fitted to them
// (Fit) before it is sent.
const (
	MaxReference = 128
	MaxTo        = 254
	MaxSubject   = 200
	MaxText      = 10000
)

// Check returns the provider's refusal of r, worded as the provider words
// it, or nil when the provider takes r.
func (r Request) Check() error {
	n := utf8.RuneCountInString
	switch {
	case r.Reference == "" || n(r.Reference) > MaxReference:
		return fmt.Errorf("reference: must be 1–%d characters", MaxReference)
	case !KnownKind(r.Kind):
		return fmt.Errorf("kind: must be one of %s", strings.Join(Kinds, ", "))
	case r.To == "" || n(r.To) > MaxTo:
		return fmt.Errorf("to: must be 1–%d characters", MaxTo)
	case n(r.Subject) > MaxSubject:
		return fmt.Errorf("subject: at most %d characters", MaxSubject)
	case n(r.Text) > MaxText:
		return fmt.Errorf("text: at most %d characters", MaxText)
	}
	return nil
}

// ellipsis stands for what Fit cut.
const ellipsis = "…"

// Fit returns s if it has at most limit characters, else its first
// limit-1 characters and an ellipsis: a subject or a text made of user
// data (an event's name) that the provider would refuse is shortened,
// never refused for good.
func Fit(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	if limit < 1 {
		return ""
	}
	cut, n := 0, 0
	for i := range s {
		if n == limit-1 {
			cut = i
			break
		}
		n++
	}
	return s[:cut] + ellipsis
}

// Message is a sent message: the answer of POST /v1/messages and an item
// of GET /v1/messages.
type Message struct {
	ID             string    `json:"id"`
	Reference      string    `json:"reference"`
	Kind           string    `json:"kind"`
	To             string    `json:"to"`
	Subject        string    `json:"subject"`
	Text           string    `json:"text"`
	IdempotencyKey string    `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
}

// The two kinds of failed call, for errors.Is.
var (
	// ErrRetryable: no answer came (a timeout, a refused connection), or
	// the provider answered 5xx or 429. The message may or may not have
	// been sent; only the same call with the same key can tell, later.
	ErrRetryable = errors.New("mail: retry later with the same key")
	// ErrRejected: the provider refused the request (a 4xx other than
	// 429). Sending it again, under any key, gets the same answer.
	ErrRejected = errors.New("mail: request rejected")
)

// Error is a call the provider did not answer with what was asked for.
// It wraps ErrRetryable or ErrRejected, and the cause when no answer came.
type Error struct {
	Op     string // "send" or "list"
	Status int    // the answer's HTTP status; 0 when none came
	Code   string // the problem's code, when the answer had one
	Detail string
	Err    error // the cause when no answer came: a timeout, a refused connection

	retryable bool
}

func (e *Error) Error() string {
	switch {
	case e.Status == 0:
		return fmt.Sprintf("mail %s: no answer: %v", e.Op, e.Err)
	case e.Err != nil:
		return fmt.Sprintf("mail %s: %d: %v", e.Op, e.Status, e.Err)
	}
	return fmt.Sprintf("mail %s: %d %s: %s", e.Op, e.Status, e.Code, e.Detail)
}

// Unwrap gives errors.Is the kind of failure and its cause.
func (e *Error) Unwrap() []error {
	kind := ErrRejected
	if e.retryable {
		kind = ErrRetryable
	}
	if e.Err == nil {
		return []error{kind}
	}
	return []error{kind, e.Err}
}

// DefaultClientTimeout bounds one call when NewClient is given 0.
const DefaultClientTimeout = 3 * time.Second

// Client is the shop's client of the mail provider (`shop mailer`, or a
// real provider with the same API). It makes one attempt per call and
// never retries: a caller that is told ErrRetryable tries again later
// with the same key, which it keeps where it keeps its own progress.
type Client struct {
	base    string
	timeout time.Duration
	http    *http.Client
}

// NewClient returns a client of the provider at baseURL (checked by the
// config: SHOP_MAILER_URL). timeout bounds one call (0: 3s); httpClient
// nil is a client with keep-alive.
func NewClient(baseURL string, timeout time.Duration, httpClient *http.Client) *Client {
	if timeout <= 0 {
		timeout = DefaultClientTimeout
	}
	if httpClient == nil {
		httpClient = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), timeout: timeout, http: httpClient}
}

// Send asks the provider to send m under key. It returns the message (sent
// now, or replayed: the key's earlier message), or an *Error wrapping
// ErrRetryable or ErrRejected.
func (c *Client) Send(ctx context.Context, key string, m Request) (Message, error) {
	payload, err := json.Marshal(m)
	if err != nil {
		return Message{}, fmt.Errorf("mail send: encode: %w", err)
	}
	var out Message
	err = c.do(ctx, "send", http.MethodPost, "/v1/messages", key, payload, &out)
	return out, err
}

// List returns the messages the provider sent about reference ("" = all),
// in creation order.
func (c *Client) List(ctx context.Context, reference string) ([]Message, error) {
	path := "/v1/messages"
	if reference != "" {
		path += "?reference=" + url.QueryEscape(reference)
	}
	var out struct {
		Items []Message `json:"items"`
	}
	err := c.do(ctx, "list", http.MethodGet, path, "", nil, &out)
	return out.Items, err
}

// do makes one call within the client's timeout and decodes a 200 or 201
// into out.
func (c *Client) do(ctx context.Context, op, method, path, key string, payload []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("mail %s: %w", op, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	tracing.InjectHeader(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return &Error{Op: op, Err: err, retryable: true}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &Error{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("read answer: %w", err), retryable: true}
	}
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		if err := json.Unmarshal(body, out); err != nil {
			return &Error{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("decode answer: %w", err), retryable: true}
		}
		return nil
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests:
		return answerError(op, resp.StatusCode, body, true)
	default:
		return answerError(op, resp.StatusCode, body, false)
	}
}

// answerError is the *Error of an answer that was not what was asked
// for, with the problem's code and detail when it has them.
func answerError(op string, status int, body []byte, retryable bool) *Error {
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil || (p.Code == "" && p.Detail == "") {
		p.Detail = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	return &Error{Op: op, Status: status, Code: p.Code, Detail: p.Detail, retryable: retryable}
}
