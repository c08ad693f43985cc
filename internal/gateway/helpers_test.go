package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/gateway"
)

// newGateway starts a gateway on a fresh journal (unless opts names one)
// behind an httptest server; both are closed when the test ends.
func newGateway(t *testing.T, opts gateway.Options) (*gateway.Server, *httptest.Server) {
	t.Helper()
	if opts.JournalPath == "" {
		opts.JournalPath = filepath.Join(t.TempDir(), "journal.jsonl")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := gateway.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, ts
}

// reply is what came back.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get(gateway.HeaderReplayed) == "true" }

// problem is the problem document of an error reply.
func (r reply) problem() (doc struct {
	Code        string `json:"code"`
	Detail      string `json:"detail"`
	DeclineCode string `json:"decline_code"`
}) {
	_ = json.Unmarshal(r.body, &doc)
	return doc
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// send makes one request; key "" sends no Idempotency-Key.
func send(client *http.Client, method, url, key, body string) (reply, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(gateway.HeaderIdempotencyKey, key)
	}
	res, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: res.StatusCode, header: res.Header, body: b}, nil
}

func mustSend(t *testing.T, ts *httptest.Server, method, path, key, body string) reply {
	t.Helper()
	r, err := send(ts.Client(), method, ts.URL+path, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func chargeJSON(amount int64, method, reference string) string {
	return fmt.Sprintf(`{"amount_cents": %d, "payment_method": %q, "reference": %q}`, amount, method, reference)
}

// mustCharge posts a charge that must answer 201 and returns it.
func mustCharge(t *testing.T, ts *httptest.Server, key, body string) gateway.Charge {
	t.Helper()
	r := mustSend(t, ts, http.MethodPost, "/v1/charges", key, body)
	if r.status != http.StatusCreated {
		t.Fatalf("charge %s: got %v, want 201", key, r)
	}
	return decode[gateway.Charge](t, r)
}

func mustRefund(t *testing.T, ts *httptest.Server, key, chargeID string) gateway.Refund {
	t.Helper()
	r := mustSend(t, ts, http.MethodPost, "/v1/refunds", key, fmt.Sprintf(`{"charge_id": %q}`, chargeID))
	if r.status != http.StatusCreated {
		t.Fatalf("refund %s: got %v, want 201", key, r)
	}
	return decode[gateway.Refund](t, r)
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// wantCharges checks the audit holds exactly n charges for reference.
func wantCharges(t *testing.T, s *gateway.Server, reference string, n int) []gateway.Charge {
	t.Helper()
	got := s.Charges(reference)
	if len(got) != n {
		t.Fatalf("charges for %q: got %d (%+v), want %d", reference, len(got), got, n)
	}
	return got
}
