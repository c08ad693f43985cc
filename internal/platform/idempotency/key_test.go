package idempotency

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/internal/platform/httpx"
)

// TestAtomic_KeyRequired: a keyed route without one well-formed
// Idempotency-Key is refused before the flow runs, and leaves no key.
func TestAtomic_KeyRequired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
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
			req, err := http.NewRequest(http.MethodPost, h.srv.URL+atomicPath, strings.NewReader(`{}`))
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
		t.Fatalf("the flow ran %d times for refused keys", n)
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

// TestAtomic_ScopedPerPrincipal: two users' keys of the same spelling are
// two keys; neither is given the other's answer.
func TestAtomic_ScopedPerPrincipal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	alice := h.mustSend(t, request{key: "shared", user: "alice"})
	bob := h.mustSend(t, request{key: "shared", user: "bob"})
	if alice.status != http.StatusCreated || bob.status != http.StatusCreated || alice.replayed() || bob.replayed() {
		t.Fatalf("got alice %d replayed=%v, bob %d replayed=%v; want two fresh 201s",
			alice.status, alice.replayed(), bob.status, bob.replayed())
	}
	if bytes.Equal(alice.body, bob.body) {
		t.Fatal("bob got alice's answer")
	}
	for _, user := range []string{"alice", "bob"} {
		if got := h.effects(t, user, "shared"); got != 1 {
			t.Fatalf("%s: %d effects, want 1", user, got)
		}
	}
	if rows := h.rows(t); len(rows) != 2 {
		t.Fatalf("got %d keys, want one per principal", len(rows))
	}
}

// TestAtomic_RepeatInterval: every repeat of a key is timed from the key's
// first submission, per flow: a double click 40 ms later and a retry two
// minutes later land in their own buckets of the histogram.
func TestAtomic_RepeatInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	body := `{"sku":"SKU-1","quantity":1}`
	h.mustSend(t, request{key: "k-repeat", body: body})
	h.clock.Advance(40 * time.Millisecond)
	h.mustSend(t, request{key: "k-repeat", body: body})
	h.clock.Advance(2 * time.Minute)
	h.mustSend(t, request{key: "k-repeat", body: body})

	hist := histogram(t, h, "shop_idempotency_repeat_interval_seconds", "flow", atomicFlow)
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
