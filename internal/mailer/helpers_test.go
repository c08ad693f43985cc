package mailer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/mailer"
)

// newMailer starts a mailer on a fresh journal (unless opts names one)
// behind an httptest server; both are closed when the test ends.
func newMailer(t *testing.T, opts mailer.Options) (*mailer.Server, *httptest.Server) {
	t.Helper()
	if opts.JournalPath == "" {
		opts.JournalPath = filepath.Join(t.TempDir(), "journal.jsonl")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := mailer.New(opts)
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

func (r reply) replayed() bool { return r.header.Get(mailer.HeaderReplayed) == "true" }

// problem is the problem document of an error reply.
func (r reply) problem() (doc struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}) {
	_ = json.Unmarshal(r.body, &doc)
	return doc
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// send makes one request; key "" sends no Idempotency-Key.
func send(ctx context.Context, client *http.Client, method, url, key, body string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(mailer.HeaderIdempotencyKey, key)
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
	r, err := send(context.Background(), ts.Client(), method, ts.URL+path, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func messageJSON(reference, kind, to string) string {
	return fmt.Sprintf(`{"reference": %q, "kind": %q, "to": %q, "subject": "Your order", "text": "Thank you."}`, reference, kind, to)
}

// receipt is the body of a receipt for reference.
func receipt(reference string) string {
	return messageJSON(reference, mailer.KindReceipt, "ann@example.com")
}

// mustPost posts a message that must answer want and returns it.
func mustPost(t *testing.T, ts *httptest.Server, key, body string, want int) mailer.Message {
	t.Helper()
	r := mustSend(t, ts, http.MethodPost, "/v1/messages", key, body)
	if r.status != want || r.replayed() != (want == http.StatusOK) {
		t.Fatalf("message %s: got %v (replayed %t), want %d", key, r, r.replayed(), want)
	}
	return decode[mailer.Message](t, r)
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

// wantMessages checks the audit holds exactly n messages for reference.
func wantMessages(t *testing.T, s *mailer.Server, reference string, n int) []mailer.Message {
	t.Helper()
	got := s.Messages(reference)
	if len(got) != n {
		t.Fatalf("messages for %q: got %d (%+v), want %d", reference, len(got), got, n)
	}
	return got
}

// holdBack stands in for the mailer's hold-back (Options.Sleep): it
// records how long the mailer asked to wait, and waits until the test lets
// it go (or the request ends). No test waits out a real delay.
type holdBack struct {
	asked   chan time.Duration
	release chan struct{}
}

func newHoldBack() *holdBack {
	return &holdBack{asked: make(chan time.Duration, 64), release: make(chan struct{})}
}

func (h *holdBack) sleep(ctx context.Context, d time.Duration) error {
	h.asked <- d
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answer is a reply or the error of a request sent in the background.
type answer struct {
	r   reply
	err error
}

// postAsync posts a message in the background; its answer arrives on the
// returned channel.
func postAsync(ctx context.Context, ts *httptest.Server, key, body string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		r, err := send(ctx, ts.Client(), http.MethodPost, ts.URL+"/v1/messages", key, body)
		out <- answer{r, err}
	}()
	return out
}
