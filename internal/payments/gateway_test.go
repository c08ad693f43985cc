package payments_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/payments"
)

// call is one request the fake gateway received.
type call struct {
	method, path, contentType, key string
	body                           []byte
}

// fakeGateway is an httptest server whose answer to the n-th call (from 1)
// the test decides; it records every call.
type fakeGateway struct {
	t      *testing.T
	server *httptest.Server
	answer func(n int, w http.ResponseWriter, r *http.Request)

	mu    sync.Mutex
	calls []call
}

func newFakeGateway(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *fakeGateway {
	t.Helper()
	f := &fakeGateway{t: t, answer: answer}
	f.server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.server.Close)
	return f
}

func (f *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("read request body: %v", err)
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"),
		key: r.Header.Get("Idempotency-Key"), body: body})
	n := len(f.calls)
	f.mu.Unlock()
	f.answer(n, w, r)
}

func (f *fakeGateway) recorded() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// client returns a client of f with short timings unless opts set them.
func (f *fakeGateway) client(t *testing.T, opts payments.GatewayOptions) *payments.Gateway {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Backoff == 0 {
		opts.Backoff = 5 * time.Millisecond
	}
	g, err := payments.NewGateway(f.server.URL, opts)
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	return g
}

// wantSameKey fails unless there were n calls, all POST path with key and
// the same body.
func wantSameKey(t *testing.T, calls []call, n int, path, key string) {
	t.Helper()
	if len(calls) != n {
		t.Fatalf("%d calls reached the gateway, want %d", len(calls), n)
	}
	for i, c := range calls {
		if c.method != http.MethodPost || c.path != path || c.key != key || string(c.body) != string(calls[0].body) {
			t.Errorf("call %d: %s %s key %q body %s; want POST %s key %q and the first call's body %s",
				i+1, c.method, c.path, c.key, c.body, path, key, calls[0].body)
		}
	}
}

var chargeReq = payments.ChargeRequest{AmountCents: 1250, PaymentMethod: "pm_card_ok", Reference: "order-1"}

const chargeJSON = `{"id": "ch_1", "status": "succeeded", "amount_cents": 1250, "reference": "order-1"}`

func answerJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func answerProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": code, "status": status, "code": code, "detail": detail})
}

// hang answers nothing until the client gives up (or 5s pass, so a broken
// client cannot hang the test).
func hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

func TestGateway_Charge(t *testing.T) {
	f := newFakeGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		answerJSON(w, http.StatusCreated, chargeJSON)
	})
	c, err := f.client(t, payments.GatewayOptions{}).Charge(context.Background(), "pay-1", chargeReq)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	want := payments.Charge{ID: "ch_1", Status: "succeeded", AmountCents: 1250, Reference: "order-1"}
	if c != want {
		t.Errorf("Charge = %+v, want %+v", c, want)
	}
	calls := f.recorded()
	wantSameKey(t, calls, 1, "/v1/charges", "pay-1")
	if ct := calls[0].contentType; ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var sent map[string]any
	if err := json.Unmarshal(calls[0].body, &sent); err != nil {
		t.Fatalf("the body is not JSON: %v: %s", err, calls[0].body)
	}
	if len(sent) != 3 || sent["amount_cents"] != 1250.0 || sent["payment_method"] != "pm_card_ok" || sent["reference"] != "order-1" {
		t.Errorf("body %s, want amount_cents, payment_method and reference of the request", calls[0].body)
	}
}

func TestGateway_Refund(t *testing.T) {
	f := newFakeGateway(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			answerProblem(w, http.StatusBadGateway, "unavailable", "upstream hiccup")
			return
		}
		answerJSON(w, http.StatusCreated, `{"id": "re_1", "charge_id": "ch_1", "amount_cents": 1250, "status": "succeeded"}`)
	})
	r, err := f.client(t, payments.GatewayOptions{}).Refund(context.Background(), "refund-pay-1", "ch_1", 0)
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if r != (payments.Refund{ID: "re_1", ChargeID: "ch_1", AmountCents: 1250, Status: "succeeded"}) {
		t.Errorf("Refund = %+v, want re_1 of ch_1", r)
	}
	calls := f.recorded()
	wantSameKey(t, calls, 2, "/v1/refunds", "refund-pay-1")
	// 0 asks for all that is left: no amount is sent.
	if string(calls[0].body) != `{"charge_id":"ch_1"}` || calls[0].contentType != "application/json" {
		t.Errorf("sent %s as %q, want {\"charge_id\":\"ch_1\"} as application/json", calls[0].body, calls[0].contentType)
	}
}

// A refund of a part sends its amount; the gateway's definite refusals
// are a *RefundRefusedError (nothing was given back), asked once; a
// refusal that says nothing of the refund leaves its outcome unknown.
func TestGateway_RefundPart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		code    string
		refused bool
	}{
		{"PastWhatIsLeft", http.StatusUnprocessableEntity, "refund_exceeds_remaining", true},
		{"RefundedWhole", http.StatusConflict, "invalid_state", true},
		{"NoSuchCharge", http.StatusNotFound, "not_found", true},
		{"Invalid", http.StatusBadRequest, "invalid_request", true},
		{"KeyReused", http.StatusUnprocessableEntity, "idempotency_key_reused", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				answerProblem(w, tc.status, tc.code, "no")
			})
			_, err := f.client(t, payments.GatewayOptions{}).Refund(context.Background(), "re-key", "ch_1", 600)
			var refused *payments.RefundRefusedError
			if errors.As(err, &refused) != tc.refused || (tc.refused && refused.Code != tc.code) {
				t.Fatalf("Refund: %v, want refused %t with %s", err, tc.refused, tc.code)
			}
			calls := f.recorded()
			if len(calls) != 1 || string(calls[0].body) != `{"charge_id":"ch_1","amount_cents":600}` {
				t.Fatalf("calls %+v, want one with the amount", calls)
			}
		})
	}
}

// TestGateway_Retry: an answer that leaves the outcome unknown is asked
// again with the same key, up to Attempts; a definite answer is not.
func TestGateway_Retry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failing  func(w http.ResponseWriter, r *http.Request) // how the failing calls fail
		failures int                                          // how many calls fail before a 201
		attempts int                                          // GatewayOptions.Attempts (0: default 2)
		calls    int                                          // calls that reach the gateway
		ok       bool
	}{
		{name: "503ThenCharged", failing: status(http.StatusServiceUnavailable), failures: 1, calls: 2, ok: true},
		{name: "500TwiceThenCharged", failing: status(http.StatusInternalServerError), failures: 2, attempts: 3, calls: 3, ok: true},
		{name: "409InProgressThenCharged", failing: func(w http.ResponseWriter, _ *http.Request) {
			answerProblem(w, http.StatusConflict, "request_in_progress", "still working on this key")
		}, failures: 1, calls: 2, ok: true},
		{name: "429ThenCharged", failing: status(http.StatusTooManyRequests), failures: 1, calls: 2, ok: true},
		{name: "TimeoutThenCharged", failing: func(_ http.ResponseWriter, r *http.Request) { hang(r) }, failures: 1, calls: 2, ok: true},
		{name: "Always503DefaultAttempts", failing: status(http.StatusServiceUnavailable), failures: 99, calls: 2},
		{name: "Always502", failing: status(http.StatusBadGateway), failures: 99, attempts: 4, calls: 4},
		{name: "AlwaysTimeout", failing: func(_ http.ResponseWriter, r *http.Request) { hang(r) }, failures: 99, attempts: 3, calls: 3},
		{name: "ConnectionDropped", failing: dropConnection, failures: 99, attempts: 2, calls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeGateway(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n <= tc.failures {
					tc.failing(w, r)
					return
				}
				answerJSON(w, http.StatusCreated, chargeJSON)
			})
			g := f.client(t, payments.GatewayOptions{Timeout: 150 * time.Millisecond, Attempts: tc.attempts})
			start := time.Now()
			c, err := g.Charge(context.Background(), "pay-retry", chargeReq)
			// A hanging gateway is given up on after each attempt's timeout,
			// not after its own 5s.
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("Charge took %s; 150ms attempts should have given up long before", took)
			}
			wantSameKey(t, f.recorded(), tc.calls, "/v1/charges", "pay-retry")
			if tc.ok {
				if err != nil || c.ID != "ch_1" {
					t.Fatalf("Charge = %+v, %v; want ch_1 after the retry", c, err)
				}
				return
			}
			if !errors.Is(err, payments.ErrOutcomeUnknown) {
				t.Fatalf("Charge error %v, want one wrapping ErrOutcomeUnknown", err)
			}
			if payments.IsDeclined(err) {
				t.Errorf("an unknown outcome reported as declined: %v", err)
			}
		})
	}
}

func status(code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		answerProblem(w, code, "unavailable", "try again")
	}
}

// dropConnection closes the connection without an answer.
func dropConnection(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// TestGateway_Definite: a decline or a refused request is the answer; it is
// not retried, and it is not an unknown outcome.
func TestGateway_Definite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   func(w http.ResponseWriter)
		declined string // the reason, if declined
		mentions string // in the error of a refusal
	}{
		{name: "Declined", declined: "the card was declined", answer: func(w http.ResponseWriter) {
			answerProblem(w, http.StatusPaymentRequired, "payment_declined", "the card was declined")
		}},
		{name: "DeclinedCodeOnly", declined: "payment_declined", answer: func(w http.ResponseWriter) {
			answerJSON(w, http.StatusPaymentRequired, `{"code": "payment_declined"}`)
		}},
		{name: "DeclinedNotJSON", declined: "no money", answer: func(w http.ResponseWriter) {
			answerJSON(w, http.StatusPaymentRequired, "  no money\n")
		}},
		{name: "400", mentions: "amount_cents: must be positive", answer: func(w http.ResponseWriter) {
			answerProblem(w, http.StatusBadRequest, "invalid_request", "amount_cents: must be positive")
		}},
		{name: "422KeyReused", mentions: "422", answer: func(w http.ResponseWriter) {
			answerProblem(w, http.StatusUnprocessableEntity, "idempotency_key_reused", "another request")
		}},
		{name: "409AlreadyRefunded", mentions: "409", answer: func(w http.ResponseWriter) {
			answerProblem(w, http.StatusConflict, "invalid_state", "charge already refunded")
		}},
		{name: "404", mentions: "404", answer: func(w http.ResponseWriter) {
			answerProblem(w, http.StatusNotFound, "not_found", "no such route")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) { tc.answer(w) })
			g := f.client(t, payments.GatewayOptions{Attempts: 3})
			_, err := g.Charge(context.Background(), "pay-definite", chargeReq)
			wantSameKey(t, f.recorded(), 1, "/v1/charges", "pay-definite")
			if err == nil {
				t.Fatal("Charge succeeded, want an error")
			}
			if errors.Is(err, payments.ErrOutcomeUnknown) {
				t.Errorf("a definite answer reported as an unknown outcome: %v", err)
			}
			var d *payments.DeclinedError
			if tc.declined == "" {
				if payments.IsDeclined(err) || errors.As(err, &d) {
					t.Errorf("a refused request reported as declined: %v", err)
				}
				if !strings.Contains(err.Error(), tc.mentions) {
					t.Errorf("error %q does not mention %q", err, tc.mentions)
				}
				return
			}
			if !errors.As(err, &d) || !payments.IsDeclined(err) {
				t.Fatalf("Charge error %v (%T), want a *DeclinedError", err, err)
			}
			if d.Reason != tc.declined {
				t.Errorf("Reason %q, want %q", d.Reason, tc.declined)
			}
		})
	}
}

// TestGateway_Cancel: a cancelled context stops the call at once, whether
// it is waiting for an answer or for the next attempt, and the outcome is
// unknown (the charge may have been made).
func TestGateway_Cancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		calls  int
	}{
		{name: "DuringAttempt", answer: func(_ http.ResponseWriter, r *http.Request) { hang(r) }, calls: 1},
		{name: "DuringBackoff", answer: status(http.StatusServiceUnavailable), calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeGateway(t, func(_ int, w http.ResponseWriter, r *http.Request) { tc.answer(w, r) })
			// Long enough that only the cancellation can end the call soon.
			g := f.client(t, payments.GatewayOptions{Timeout: 10 * time.Second, Attempts: 5, Backoff: 10 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := g.Charge(ctx, "pay-cancel", chargeReq)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Charge returned %s after it was cancelled at 200ms", took)
			}
			if !errors.Is(err, payments.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Charge error %v, want ErrOutcomeUnknown and the context's error", err)
			}
			wantSameKey(t, f.recorded(), tc.calls, "/v1/charges", "pay-cancel")
		})
	}
	t.Run("AlreadyCancelled", func(t *testing.T) {
		f := newFakeGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			answerJSON(w, http.StatusCreated, chargeJSON)
		})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := f.client(t, payments.GatewayOptions{Attempts: 3}).Charge(ctx, "pay-cancelled", chargeReq)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Charge error %v, want context.Canceled", err)
		}
		if n := len(f.recorded()); n != 0 {
			t.Errorf("%d calls reached the gateway on a cancelled context, want 0", n)
		}
	})
}

func TestNewGateway(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8081", true},
		{"https://gateway.example", true},
		{"http://gateway:8081/", true},
		{"", false},
		{"gateway:8081", false},
		{"localhost", false},
		{"http://", false},
		{"http:///v1", false},
		{"ftp://gateway.example", false},
		{"unix:///run/gateway.sock", false},
		{"://gateway", false},
		{"http://gate way", false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			g, err := payments.NewGateway(tc.url, payments.GatewayOptions{})
			if tc.ok != (err == nil) || tc.ok != (g != nil) {
				t.Errorf("NewGateway(%q) = %v, %v; want ok %t", tc.url, g, err, tc.ok)
			}
		})
	}
	t.Run("TrailingSlash", func(t *testing.T) {
		f := newFakeGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			answerJSON(w, http.StatusCreated, chargeJSON)
		})
		g, err := payments.NewGateway(f.server.URL+"/", payments.GatewayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Charge(context.Background(), "pay-slash", chargeReq); err != nil {
			t.Fatalf("Charge: %v", err)
		}
		wantSameKey(t, f.recorded(), 1, "/v1/charges", "pay-slash")
	})
}
