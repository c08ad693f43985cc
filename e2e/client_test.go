//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shop-example/shop/internal/platform/contract"
)

// Retry bounds: a request is sent at most maxAttempts times; between
// attempts the client waits Retry-After, or a backoff, capped at maxBackoff.
const (
	maxAttempts = 40
	maxBackoff  = time.Second
)

// client talks to the balancer as an API client would, retrying what is
// safe to retry with the same Idempotency-Key: no answer at all, 502/503/504
// from the balancer or a replica, and 409 request_in_progress or
// resource_busy (the first request with that key is still running, or the
// lock is busy). Everything else is an answer.
type client struct {
	base string
	http *http.Client

	mu      sync.Mutex
	retries map[string]int // why requests were sent again, counted
}

// newClient returns a client of the API at base. Every exchange with the
// API is checked against docs/openapi.yaml (package contract) and a
// mismatch reported to report, or to the test the request's context names
// (contract.WithReporter). The balancer's own answers (502, 504) and other
// servers' (the gateway's audit) are not the API's and are not checked.
func newClient(base string, report contract.Reporter) (*client, error) {
	spec, err := contract.Load()
	if err != nil {
		return nil, err
	}
	baseURL, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	checked := &contract.Transport{
		Spec:   spec,
		Next:   &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64},
		Report: report,
		Skip: func(req *http.Request, res *http.Response) bool {
			return req.URL.Host != baseURL.Host ||
				res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusGatewayTimeout
		},
	}
	return &client{
		base:    base,
		http:    &http.Client{Transport: checked, Timeout: 20 * time.Second},
		retries: map[string]int{},
	}, nil
}

type request struct {
	method, path string
	base         string // another server than the client's, if set
	token        string // bearer token, if any
	key          string // Idempotency-Key, if any
	body         any    // sent as JSON, if not nil
	// offContract is why the request breaks docs/openapi.yaml on purpose
	// (contract.OffContract); its answer is still checked.
	offContract string
}

type response struct {
	status   int
	header   http.Header
	body     []byte
	attempts int
}

// problem is an RFC 9457 error body.
type problem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

func (r response) problem() problem {
	var p problem
	_ = json.Unmarshal(r.body, &p)
	return p
}

func (r response) String() string {
	return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body))
}

// decode reads the JSON body of r into v.
func (r response) decode(v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("decode %q: %w", r.body, err)
	}
	return nil
}

// do sends req until it gets an answer that is not transient, at most
// maxAttempts times.
func (c *client) do(ctx context.Context, req request) (response, error) {
	var lastErr error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		resp, err := c.once(ctx, req)
		resp.attempts = attempt
		reason, wait := "", backoff(attempt)
		switch {
		case ctx.Err() != nil:
			return resp, ctx.Err()
		case err != nil:
			reason, lastErr = "transport error", err
		case resp.status == http.StatusBadGateway || resp.status == http.StatusServiceUnavailable ||
			resp.status == http.StatusGatewayTimeout:
			reason, lastErr = strconv.Itoa(resp.status), fmt.Errorf("%s", resp)
		case resp.status == http.StatusConflict &&
			(resp.problem().Code == "request_in_progress" || resp.problem().Code == "resource_busy"):
			reason, lastErr = "409 "+resp.problem().Code, fmt.Errorf("%s", resp)
		default:
			return resp, nil
		}
		if s, err := strconv.Atoi(resp.header.Get("Retry-After")); err == nil && s > 0 {
			wait = min(time.Duration(s)*time.Second, maxBackoff)
		}
		c.count(reason)
		select {
		case <-ctx.Done():
			return resp, ctx.Err()
		case <-time.After(wait):
		}
	}
	return response{}, fmt.Errorf("%s %s: no answer after %d attempts: %w", req.method, req.path, maxAttempts, lastErr)
}

// once sends req one time.
func (c *client) once(ctx context.Context, req request) (response, error) {
	var body io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return response{}, err
		}
		body = bytes.NewReader(b)
	}
	base := c.base
	if req.base != "" {
		base = req.base
	}
	if req.offContract != "" {
		ctx = contract.OffContract(ctx, req.offContract)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, base+req.path, body)
	if err != nil {
		return response{}, err
	}
	if req.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if req.token != "" {
		hr.Header.Set("Authorization", "Bearer "+req.token)
	}
	if req.key != "" {
		hr.Header.Set("Idempotency-Key", req.key)
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func backoff(attempt int) time.Duration {
	return min(50*time.Millisecond<<min(attempt, 5), maxBackoff)
}

func (c *client) count(reason string) {
	c.mu.Lock()
	c.retries[reason]++
	c.mu.Unlock()
}

// retrySummary says why requests were sent again, e.g. "502 ×3, transport error ×1".
func (c *client) retrySummary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.retries) == 0 {
		return "none"
	}
	var parts []string
	for k, n := range c.retries {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
