package idempotency

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/internal/platform/httpx"
)

func TestMiddleware_KeyRequired(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	tests := []struct {
		name   string
		header []string // Idempotency-Key values; nil sends none
	}{
		{"Missing", nil},
		{"Empty", []string{""}},
		{"TooLong", []string{strings.Repeat("k", 256)}},
		{"NotASCII", []string{"clé-1"}},
		{"Tab", []string{"a\tb"}},
		{"TwoHeaders", []string{"k1", "k2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/things/1", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(headerUser, "alice")
			for _, v := range tt.header {
				req.Header.Add(HeaderKey, v)
			}
			rep, err := do(h.srv.Client(), req)
			if err != nil {
				t.Fatal(err)
			}
			if rep.status != http.StatusBadRequest || rep.code() != "idempotency_key_required" {
				t.Fatalf("got %d %s, want 400 idempotency_key_required", rep.status, rep.body)
			}
			if ct := rep.header.Get("Content-Type"); ct != httpx.ProblemContentType {
				t.Fatalf("Content-Type %q, want %q", ct, httpx.ProblemContentType)
			}
			if !strings.Contains(string(rep.body), "Idempotency-Key") {
				t.Fatalf("detail does not name the header: %s", rep.body)
			}
		})
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times for refused keys", n)
	}
	if rows := h.rows(t); len(rows) != 0 {
		t.Fatalf("refused keys left rows: %v", rows)
	}

	t.Run("LongestAndSpaces", func(t *testing.T) {
		for _, key := range []string{strings.Repeat("k", 255), "order 1 ~!"} {
			if rep := h.mustSend(t, request{key: key}); rep.status != http.StatusCreated {
				t.Fatalf("key %q: got %d %s, want 201", key, rep.status, rep.body)
			}
		}
	})
}

func TestMiddleware_Replay(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.mustSend(t, request{key: "k1", body: `{"sku":"SKU-1","quantity":2}`})
	if first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("first: got %d replayed=%v %s", first.status, first.replayed(), first.body)
	}
	// The handler echoes the body it read: the middleware gave it back.
	if !strings.Contains(string(first.body), `SKU-1`) {
		t.Fatalf("handler did not see the body: %s", first.body)
	}
	second := h.mustSend(t, request{key: "k1", body: `{"sku":"SKU-1","quantity":2}`})
	if second.status != first.status || !bytes.Equal(second.body, first.body) {
		t.Fatalf("replay: got %d %s, want %d %s", second.status, second.body, first.status, first.body)
	}
	if !second.replayed() {
		t.Fatal("replay lacks Idempotent-Replayed: true")
	}
	for _, name := range []string{"Content-Type", "Location", "ETag"} {
		if got, want := second.header.Get(name), first.header.Get(name); got != want || want == "" {
			t.Fatalf("replayed %s = %q, want %q", name, got, want)
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if got := counter(t, h, "shop_conflicts_stopped_total", "flow", route, "layer", "idempotency"); got != 1 {
		t.Fatalf("conflicts stopped = %v, want 1", got)
	}
}

func TestMiddleware_KeyReused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.mustSend(t, request{key: "k1", body: `{"quantity":1}`})
	tests := []struct {
		name string
		req  request
	}{
		{"OtherBody", request{key: "k1", body: `{"quantity":2}`}},
		{"OtherPath", request{key: "k1", body: `{"quantity":1}`, path: "/v1/things/2"}},
		{"OtherMethod", request{key: "k1", body: `{"quantity":1}`, method: http.MethodPut}},
		{"DuplicateKeyIsNotTheLastOne", request{key: "k1", body: `{"quantity":0,"quantity":1}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := h.mustSend(t, tt.req)
			if rep.status != http.StatusUnprocessableEntity || rep.code() != "idempotency_key_reused" {
				t.Fatalf("got %d %s, want 422 idempotency_key_reused", rep.status, rep.body)
			}
		})
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddleware_CanonicalBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.mustSend(t, request{key: "k1", body: `{"items":[{"sku":"A","quantity":1}],"note":"x"}`})
	again := h.mustSend(t, request{key: "k1", body: "{ \"note\" : \"x\",\n \"items\": [ {\"quantity\": 1, \"sku\": \"A\"} ] }\n"})
	if again.status != http.StatusCreated || !again.replayed() || !bytes.Equal(again.body, first.body) {
		t.Fatalf("re-encoded body: got %d replayed=%v %s, want the replay of %s", again.status, again.replayed(), again.body, first.body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddleware_ScopedPerPrincipal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	alice := h.mustSend(t, request{key: "shared", user: "alice"})
	bob := h.mustSend(t, request{key: "shared", user: "bob"})
	if alice.status != http.StatusCreated || bob.status != http.StatusCreated || alice.replayed() || bob.replayed() {
		t.Fatalf("got alice %d replayed=%v, bob %d replayed=%v; want two fresh 201s",
			alice.status, alice.replayed(), bob.status, bob.replayed())
	}
	if bytes.Equal(alice.body, bob.body) {
		t.Fatal("bob got alice's answer")
	}
	if n := h.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if rows := h.rows(t); len(rows) != 2 {
		t.Fatalf("got %d rows, want one per principal", len(rows))
	}
}

func TestMiddleware_NotStored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		act    string
		status int
	}{
		{"fail", http.StatusInternalServerError},
		{"panic", http.StatusInternalServerError},
		{"busy", http.StatusConflict},
		{"rate_limited", http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			failed := h.mustSend(t, request{key: "k1", act: tt.act})
			if failed.status != tt.status {
				t.Fatalf("got %d %s, want %d", failed.status, failed.body, tt.status)
			}
			if rows := h.rows(t); len(rows) != 0 {
				t.Fatalf("a %d answer left a row: %v", tt.status, rows)
			}
			retry := h.mustSend(t, request{key: "k1"})
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: got %d replayed=%v %s, want a fresh 201", retry.status, retry.replayed(), retry.body)
			}
			if n := h.runs.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
		})
	}
}

func TestMiddleware_StoresRefusal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.mustSend(t, request{key: "k1", act: "out_of_stock"})
	if first.status != http.StatusConflict || first.code() != "out_of_stock" {
		t.Fatalf("got %d %s, want 409 out_of_stock", first.status, first.body)
	}
	// The retry would succeed if it ran: it must get the first answer.
	again := h.mustSend(t, request{key: "k1"})
	if again.status != http.StatusConflict || !again.replayed() || !bytes.Equal(again.body, first.body) {
		t.Fatalf("got %d replayed=%v %s, want the replay of %s", again.status, again.replayed(), again.body, first.body)
	}
	if ct := again.header.Get("Content-Type"); ct != httpx.ProblemContentType {
		t.Fatalf("replayed Content-Type %q", ct)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddleware_ClientHangsUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.send(request{key: "k1", act: "wait_for_hangup", gate: "a", ctx: ctx})
		errc <- err
	}()
	wait(t, h.gate("a").started, "the handler to start")
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request got an answer")
	}
	wait(t, h.gate("a").done, "the middleware to finish")
	// The release ran on a detached context: the key is free at once,
	// not only when its lease runs out.
	if rows := h.rows(t); len(rows) != 0 {
		t.Fatalf("the hung-up request left its key claimed: %v", rows)
	}
	if rep := h.mustSend(t, request{key: "k1"}); rep.status != http.StatusCreated || rep.replayed() {
		t.Fatalf("retry: got %d replayed=%v, want a fresh 201", rep.status, rep.replayed())
	}
}

func TestMiddleware_BodyTooLarge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// No Content-Length, so the limit is found while reading.
	body := io.MultiReader(strings.NewReader(`{"pad":"`), strings.NewReader(strings.Repeat("x", 70<<10)), strings.NewReader(`"}`))
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/things/1", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(headerUser, "alice")
	req.Header.Set(HeaderKey, "k1")
	rep, err := do(h.srv.Client(), req)
	if err != nil {
		t.Fatal(err)
	}
	if rep.status != http.StatusRequestEntityTooLarge || rep.code() != "payload_too_large" {
		t.Fatalf("got %d %s, want 413 payload_too_large", rep.status, rep.body)
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestMiddleware_NeedsPrincipal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rep := h.mustSend(t, request{key: "k1", noUser: true})
	if rep.status != http.StatusInternalServerError {
		t.Fatalf("got %d %s, want 500 for a route wired without auth", rep.status, rep.body)
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

// Every repeat of a key is timed from the key's first submission, per
// flow: a double click 40 ms later and a retry two minutes later land in
// their own buckets of the histogram.
func TestMiddleware_RepeatInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	body := `{"sku":"SKU-1","quantity":1}`
	h.mustSend(t, request{key: "k-repeat", body: body})
	h.clock.Advance(40 * time.Millisecond)
	h.mustSend(t, request{key: "k-repeat", body: body})
	h.clock.Advance(2 * time.Minute)
	h.mustSend(t, request{key: "k-repeat", body: body})

	hist := histogram(t, h, "shop_idempotency_repeat_interval_seconds", "flow", route)
	if hist.GetSampleCount() != 2 {
		t.Fatalf("%d repeats observed, want 2", hist.GetSampleCount())
	}
	if got, want := hist.GetSampleSum(), 0.04+120.04; got < want-0.001 || got > want+0.001 {
		t.Errorf("sum of intervals %.3fs, want %.3fs", got, want)
	}
	for _, b := range hist.GetBucket() {
		var want uint64
		switch {
		case b.GetUpperBound() >= 120.04:
			want = 2
		case b.GetUpperBound() >= 0.04:
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket ≤%gs holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

func histogram(t *testing.T, h *harness, name string, labels ...string) *dto.Histogram {
	t.Helper()
	families, err := h.metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == name && hasLabels(m, labels) {
				return m.GetHistogram()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

// A completion or release that fails (here every first try does: its
// deadline is a nanosecond) lets the answer go out and leaves the key
// claimed. The store tries once more in the background, so a retry soon
// gets the stored answer, or runs afresh after a release, instead of
// being told request_in_progress until the lease ends (never, on this
// frozen clock).
func TestMiddleware_FinishRetried(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		act    string
		status int
		want   string // what a retry gets: "replay" or "fresh"
	}{
		{"", http.StatusCreated, "replay"},
		{"out_of_stock", http.StatusConflict, "replay"},
		{"fail", http.StatusInternalServerError, "fresh"},
	} {
		t.Run(tt.want+"_"+strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			h := newHarnessWith(t, Options{finishTimeout: time.Nanosecond})
			first := h.mustSend(t, request{key: "k1", act: tt.act})
			if first.status != tt.status {
				t.Fatalf("first: got %d %s, want %d", first.status, first.body, tt.status)
			}
			deadline := time.Now().Add(testDeadline)
			for {
				again := h.mustSend(t, request{key: "k1", act: tt.act})
				done := again.replayed() && bytes.Equal(again.body, first.body)
				if tt.want == "fresh" {
					done = !again.replayed() && again.code() != "request_in_progress"
				}
				if done {
					break
				}
				if again.code() != "request_in_progress" || time.Now().After(deadline) {
					t.Fatalf("retry: got %d replayed=%v %s; want the key finished by the store's second try", again.status, again.replayed(), again.body)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if want := map[string]int64{"replay": 1, "fresh": 2}[tt.want]; h.runs.Load() < want {
				t.Errorf("handler ran %d times, want %d", h.runs.Load(), want)
			}
			if got := counter(t, h, "shop_idempotency_results_total", "result", "error"); got != 0 {
				t.Errorf("results{error} = %v, want 0: the second try made it", got)
			}
		})
	}
}

// TestStore_WaitAwaitsSecondTries: a stopping replica waits for the keys
// still being finished in the background. The second try of a completion is
// held up by a transaction that locks its key's row; Wait must not return
// until that try could finish, and then the key is stored.
func TestStore_WaitAwaitsSecondTries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarnessWith(t, Options{finishTimeout: time.Nanosecond})
	answered := start(t, h, request{key: "k1", gate: "held"})
	tx, err := h.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below unless the test failed
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE key = 'k1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	h.gate("held").release()
	if first := <-answered; first.status != http.StatusCreated {
		t.Fatalf("first: got %d %s, want 201", first.status, first.body)
	}

	waited := make(chan struct{})
	go func() { h.store.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a second try was still held up")
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wait(t, waited, "Wait, once the second try could finish")
	if r := h.rows(t)["alice/k1"]; !r.completed {
		t.Fatalf("after Wait: key k1 %+v, want it completed", r)
	}
}
