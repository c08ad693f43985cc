package lab

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// spanAt is a span of request i, trace tr, from..to milliseconds after t0.
func spanAt(t0 time.Time, i int, tr, id, parent, name string, from, to float64, attrs map[string]any, events ...SpanEvent) Span {
	ms := func(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }
	kind := "internal"
	if parent == "" {
		kind = "server"
	}
	if attrs == nil {
		attrs = map[string]any{}
	}
	return Span{Run: "0000000a", Request: i, TraceID: tr, SpanID: id, ParentID: parent, Name: name, Kind: kind,
		Replica: fmt.Sprintf("api-%d", i%2+1), Start: ms(from), End: ms(to), Attrs: attrs, Events: events}
}

// failed is sp with an error status: a transaction that rolled back.
func failed(sp Span) Span {
	sp.Failed = true
	return sp
}

// TestDrawWaterfall: each request's server span is a row, in start order,
// with its bars and ticks on the first request's time axis; the row says
// what its spans say: the lock waited on or busy, a write lost at the
// version check, a replay, the layer that stopped it. Numbers read back
// from the store are float64; as recorded, int64.
func TestDrawWaterfall(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	spans := []Span{
		// Request 3, the first to start: the winner, charged under the lock.
		spanAt(t0, 3, "t3", "r3", "", "POST /v1/orders/:id/payments", 0, 12, map[string]any{"http.response.status_code": float64(201)}),
		spanAt(t0, 3, "t3", "w3", "r3", "lock.wait", 1, 2, map[string]any{"shop.lock.result": "acquired", "shop.lock.tries": float64(1)}),
		spanAt(t0, 3, "t3", "h3", "r3", "lock.hold", 2, 11, nil),
		spanAt(t0, 3, "t3", "g3", "h3", "gateway /v1/charges", 3, 8, nil),
		spanAt(t0, 3, "t3", "x3", "h3", "db.tx", 8, 10, nil),
		// Request 0: waited three tries, then the lock was still held.
		spanAt(t0, 0, "t0", "r0", "", "POST /v1/orders/:id/payments", 0.5, 6, map[string]any{"http.response.status_code": int64(409), "shop.layer": "lock"}),
		spanAt(t0, 0, "t0", "w0", "r0", "lock.wait", 1, 5.5, map[string]any{"shop.lock.result": "busy", "shop.lock.tries": int64(3)}),
		// Request 1: its write lost at the version check, retried, then
		// refused by the state rule; its transaction rolled back.
		spanAt(t0, 1, "t1", "r1", "", "POST /v1/orders/:id/cancel", 2, 9, map[string]any{"http.response.status_code": float64(409), "shop.layer": "state"},
			SpanEvent{Name: "retry", At: at(4), Attrs: map[string]any{"shop.layer": "version", "shop.attempt": float64(1)}}),
		failed(spanAt(t0, 1, "t1", "x1", "r1", "db.tx", 3, 4, nil)),
		spanAt(t0, 1, "t1", "i1", "r1", "db.tx", 5, 8, nil, SpanEvent{Name: "stopped", At: at(7.5), Attrs: map[string]any{"shop.layer": "state"}}),
		// Request 4: a second payment of the order, refused by layer 4.
		spanAt(t0, 4, "t4", "r4", "", "POST /v1/orders/:id/payments", 3, 5, map[string]any{"http.response.status_code": float64(409), "shop.layer": "constraint"}),
		failed(spanAt(t0, 4, "t4", "x4", "r4", "db.tx", 3.5, 4.5, map[string]any{"shop.constraint": "payments_one_active_per_order"})),
		// Request 2: a replay, answered from its key's record.
		spanAt(t0, 2, "t2", "r2", "", "POST /v1/orders", 1, 2, map[string]any{"http.response.status_code": float64(201), "shop.layer": "idempotency",
			"shop.idempotency.replayed": true}),
		spanAt(t0, 2, "t2", "k2", "r2", "idempotency create_order", 1.1, 1.9, map[string]any{"shop.idempotency.outcome": "replayed"}),
	}
	w := drawWaterfall(spans, 6)

	if w.Requests != 6 || w.Spans != len(spans) || w.MS != 12 || len(w.Rows) != 5 {
		t.Fatalf("waterfall: %d requests, %d spans, %v ms, %d rows; want 6, %d, 12, 5", w.Requests, w.Spans, w.MS, len(w.Rows), len(spans))
	}
	var order []int
	for _, r := range w.Rows {
		order = append(order, r.I)
	}
	if !slices.Equal(order, []int{3, 0, 2, 1, 4}) {
		t.Errorf("rows in the order %v, want by start: 3, 0, 2, 1, 4", order)
	}
	rows := map[int]Row{}
	for _, r := range w.Rows {
		rows[r.I] = r
	}
	kinds := func(r Row) (out []string) {
		for _, b := range r.Bars {
			out = append(out, b.Kind)
		}
		return out
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"the winner: 201, no layer, bars in start order", rows[3].Status == 201 && rows[3].Layer == "" && !rows[3].Waited &&
			slices.Equal(kinds(rows[3]), []string{"lock.wait", "lock.hold", "gateway", "db.tx"}) && rows[3].MS == 12 && rows[3].Replica == "api-2"},
		{"the lock's loser: waited, busy, stopped by the lock", rows[0].Status == 409 && rows[0].Layer == "lock" && rows[0].Waited &&
			rows[0].Bars[0] == Bar{Kind: "lock.wait", StartMS: 1, MS: 4.5, Result: "busy", Tries: 3} && rows[0].StartMS == 0.5 && !rows[0].LostAtVersion},
		{"lost at version, then stopped by the state rule", rows[1].Layer == "state" && rows[1].LostAtVersion &&
			slices.Equal(rows[1].Ticks, []Tick{{Kind: "retry", AtMS: 4, Layer: "version"}, {Kind: "stopped", AtMS: 7.5, Layer: "state"}}) &&
			rows[1].Bars[0].Failed && !rows[1].Bars[1].Failed},
		{"refused by a constraint", rows[4].Layer == "constraint" &&
			rows[4].Bars[0] == Bar{Kind: "db.tx", StartMS: 3.5, MS: 1, Failed: true, Constraint: "payments_one_active_per_order"}},
		{"a replay", rows[2].Replayed && rows[2].Layer == "idempotency" && rows[2].Bars[0] == Bar{Kind: "idempotency", StartMS: 1.1, MS: 0.8, Result: "replayed"}},
	} {
		if !c.ok {
			t.Errorf("%s: %+v", c.name, w.Rows)
		}
	}
}

// TestDrawWaterfall_Nothing: no span found is no row, not a failure.
func TestDrawWaterfall_Nothing(t *testing.T) {
	if w := drawWaterfall(nil, 10); len(w.Rows) != 0 || w.Rows == nil || w.Requests != 10 {
		t.Errorf("waterfall of no spans: %+v", w)
	}
}
