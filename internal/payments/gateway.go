package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shop-example/shop/internal/platform/tracing"
)

// Charge is the gateway's record of money taken.
type Charge struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	AmountCents int64  `json:"amount_cents"`
	Reference   string `json:"reference"`
}

// Refund is the gateway's record of money given back: all of a charge,
// or a part.
type Refund struct {
	ID          string `json:"id"`
	ChargeID    string `json:"charge_id"`
	AmountCents int64  `json:"amount_cents"`
	Status      string `json:"status"`
}

// StatusError is an answer of the gateway that is neither a success nor
// a reason to ask again: the request was refused, with the status and the
// problem's code.
type StatusError struct {
	Path   string
	Status int
	Code   string
	Detail string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: gateway refused the request (%d): %s", e.Path, e.Status, e.Detail)
}

// RefundRefusedError is the gateway's definite "no" to a refund: nothing
// was given back. The charge is not there, or it has less left than was
// asked (Code refund_exceeds_remaining), or none (invalid_state), or the
// request was invalid.
type RefundRefusedError struct {
	Code   string
	Detail string
}

func (e *RefundRefusedError) Error() string { return "refund refused: " + e.Detail }

// DeclinedError is the gateway's definite "no": nothing was charged.
type DeclinedError struct {
	Reason string
}

func (e *DeclinedError) Error() string { return "declined: " + e.Reason }

// RefusedError is the gateway's 400: the request is invalid (an unknown
// payment method), and nothing was charged.
type RefusedError struct {
	Detail string
}

func (e *RefusedError) Error() string { return "refused as invalid: " + e.Detail }

// GatewayOptions tune the client. Zero values take the defaults.
type GatewayOptions struct {
	// Timeout bounds one attempt (default 3s). An attempt that times out
	// may still have charged: the outcome is unknown, and only a retry
	// with the same key can tell.
	Timeout time.Duration
	// Attempts bounds how often one call is tried (default 2).
	Attempts int
	// Backoff is the pause before the second attempt, doubled after each
	// (default 100ms, jittered).
	Backoff time.Duration
	// Client is the HTTP client (default: a client with keep-alive).
	Client *http.Client
}

// Gateway is the client of the payment gateway (`shop gateway`, or a real
// processor with the same API). Every call carries an Idempotency-Key and
// is retried with the same key, so a retry can never charge twice.
type Gateway struct {
	base string
	opts GatewayOptions
}

// NewGateway returns a client of the gateway at baseURL.
func NewGateway(baseURL string, opts GatewayOptions) (*Gateway, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("gateway url: want http(s)://host, got %q", baseURL)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 2
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 100 * time.Millisecond
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	return &Gateway{base: strings.TrimRight(baseURL, "/"), opts: opts}, nil
}

// ChargeRequest is what is charged: amount, method, and the order it pays.
type ChargeRequest struct {
	AmountCents   int64  `json:"amount_cents"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
}

// Charge asks the gateway to take money under key. It returns the charge,
// a *DeclinedError when the gateway refused, or an error wrapping
// ErrOutcomeUnknown when no attempt got an answer.
func (g *Gateway) Charge(ctx context.Context, key string, req ChargeRequest) (Charge, error) {
	var c Charge
	err := g.post(ctx, "/v1/charges", key, req, &c)
	return c, err
}

// refundRequest is what a refund gives back: amountCents of chargeID, or
// with 0 all that is left of it.
type refundRequest struct {
	ChargeID    string `json:"charge_id"`
	AmountCents int64  `json:"amount_cents,omitempty"`
}

// Refund asks the gateway to give amountCents of a charge back under key;
// 0 gives back all that is left of it. It returns the refund, a
// *RefundRefusedError when the gateway refused for good (nothing was
// given back), or an error wrapping ErrOutcomeUnknown when no attempt got
// an answer: then only asking again with the same key can tell.
func (g *Gateway) Refund(ctx context.Context, key, chargeID string, amountCents int64) (Refund, error) {
	var r Refund
	err := g.post(ctx, "/v1/refunds", key, refundRequest{ChargeID: chargeID, AmountCents: amountCents}, &r)
	var refused *RefusedError
	var st *StatusError
	switch {
	case errors.As(err, &refused):
		return r, &RefundRefusedError{Code: "invalid_request", Detail: refused.Detail}
	case errors.As(err, &st) && st.Code != "idempotency_key_reused" &&
		(st.Status == http.StatusNotFound || st.Status == http.StatusConflict || st.Status == http.StatusUnprocessableEntity):
		return r, &RefundRefusedError{Code: st.Code, Detail: st.Detail}
	}
	return r, err
}

// post sends body to path with the Idempotency-Key, retrying with the same
// key on timeouts, connection errors and 5xx, within the attempt budget and
// ctx.
func (g *Gateway) post(ctx context.Context, path, key string, body, out any) (err error) {
	ctx, span := tracing.Start(ctx, "gateway "+path, attribute.String("shop.gateway.idempotency_key", key))
	defer func() { tracing.End(span, err) }()
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	var last error
	attempts := 0
	for attempt := 1; attempt <= g.opts.Attempts; attempt++ {
		if attempt > 1 {
			pause := g.opts.Backoff << (attempt - 2)
			pause = pause/2 + rand.N(pause)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s: %w (after %w)", ErrOutcomeUnknown, path, ctx.Err(), last)
			case <-time.After(pause):
			}
		}
		attempts++
		tracing.Set(ctx, attribute.Int("shop.gateway.attempts", attempts))
		retry, err := g.attempt(ctx, path, key, payload, out)
		if err == nil || !retry {
			return err
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("%w: %s after %d attempts: %w", ErrOutcomeUnknown, path, attempts, last)
}

// attempt makes one call. retry reports whether the error leaves the
// outcome unknown, so the same call may be tried again.
func (g *Gateway) attempt(ctx context.Context, path, key string, payload []byte, out any) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+path, bytes.NewReader(payload))
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	tracing.InjectHeader(ctx, req.Header)
	resp, err := g.opts.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return true, fmt.Errorf("%s: read answer: %w", path, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		if err := json.Unmarshal(body, out); err != nil {
			return true, fmt.Errorf("%s: decode answer: %w", path, err)
		}
		return false, nil
	case resp.StatusCode == http.StatusPaymentRequired:
		return false, &DeclinedError{Reason: problemDetail(body)}
	case resp.StatusCode == http.StatusBadRequest:
		return false, &RefusedError{Detail: problemDetail(body)}
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode == http.StatusConflict && problemCode(body) == "request_in_progress":
		// Unknown, or the gateway still working on this key: ask again.
		return true, fmt.Errorf("%s: gateway answered %d: %s", path, resp.StatusCode, problemDetail(body))
	default:
		return false, &StatusError{Path: path, Status: resp.StatusCode, Code: problemCode(body), Detail: problemDetail(body)}
	}
}

// problemCode takes the code out of a problem+json answer.
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// problemDetail takes the detail (or code) out of a problem+json answer.
func problemDetail(body []byte) string {
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil || (p.Detail == "" && p.Code == "") {
		return strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	if p.Detail == "" {
		return p.Code
	}
	return p.Detail
}

// IsDeclined reports whether err is the gateway's definite refusal.
func IsDeclined(err error) bool {
	var d *DeclinedError
	return errors.As(err, &d)
}
