package idempotency

import (
	"context"
	"testing"
	"time"
)

// TestAtomic_ClientGoneIs499: a keyed request whose client hung up while
// its flow ran (between two committed phases, or inside its one
// transaction) fails with the client's cancellation. The failure goes to
// the edge as the handler returned it, which logs it as 499 at INFO and
// counts it under status 499, as on a route without the middleware: a
// 500 at ERROR would page an operator for a client that left.
func TestAtomic_ClientGoneIs499(t *testing.T) {
	t.Parallel()
	for _, act := range []string{"two_phase_hangup", "in_transaction"} {
		t.Run(act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := request{key: "k1", act: act, gate: "a", ctx: ctx}
			if act == "in_transaction" {
				r.act = "" // the one-transaction flow, held at its gate after the claim
			}
			errc := make(chan error, 1)
			go func() { _, err := h.send(r); errc <- err }()
			wait(t, h.gate("a").started, "the flow to start")
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("the request whose client hung up got an answer")
			}
			// The server sees the connection closed a moment after the
			// client does; let the flow go on only once it has.
			wait(t, h.gate("a").ctx.Done(), "the server to see the client gone")
			h.gate("a").release()
			wait(t, h.gate("a").done, "the middleware to finish")

			deadline := time.Now().Add(testDeadline)
			for counter(t, h, "shop_http_requests_total", "status", "499") != 1 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := counter(t, h, "shop_http_requests_total", "status", "499"); got != 1 {
				t.Errorf("shop_http_requests_total{status=499} = %v, want 1", got)
			}
			if got := counter(t, h, "shop_http_requests_total", "status", "500"); got != 0 {
				t.Errorf("shop_http_requests_total{status=500} = %v, want 0", got)
			}
			for _, l := range h.logs.lines(t) {
				if l["level"] == "ERROR" {
					t.Errorf("a client gone is logged at ERROR: %v", l)
				}
				if l["msg"] == "request" && (l["status"] != float64(499) || l["level"] != "INFO") {
					t.Errorf("request log = %v, want status 499 at INFO", l)
				}
			}
			if rows := h.rows(t); len(rows) != 0 {
				t.Errorf("keys %v, want none: the claim is freed for the retry", rows)
			}
		})
	}
}
