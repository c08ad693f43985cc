package lab

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Waterfall is the event "waterfall": the race's requests as their own
// spans tell them, each a row of bars on one time axis, so that the page
// shows which requests waited on the lock, which lost at the version
// check, which were replays, and which layer stopped each loser.
type Waterfall struct {
	Requests int     `json:"requests"` // the race's requests that were answered
	Spans    int     `json:"spans"`    // the spans read
	MS       float64 `json:"ms"`       // from the first request's start to the last span's end
	Rows     []Row   `json:"rows"`     // one per request whose span was found, in start order
}

// Row is one request: its server span, and the bars and ticks of the
// spans below it.
type Row struct {
	I       int     `json:"i"`     // the request's number: its answer's i
	Route   string  `json:"route"` // the server span's name, e.g. "POST /v1/orders/:id/payments"
	Replica string  `json:"replica"`
	StartMS float64 `json:"start_ms"` // after the first request's start
	MS      float64 `json:"ms"`
	Status  int     `json:"status"`
	// Replayed: answered from its key's record
	// (shop.idempotency.replayed).
	Replayed bool `json:"replayed,omitempty"`
	// Layer is the layer that stopped it (shop.layer on its span).
	Layer string `json:"layer,omitempty"`
	// Waited: one of its locks took more than one try.
	Waited bool `json:"waited,omitempty"`
	// LostAtVersion: the version check refused one of its writes (a
	// retry naming it), or stopped it.
	LostAtVersion bool   `json:"lost_at_version,omitempty"`
	Bars          []Bar  `json:"bars"`
	Ticks         []Tick `json:"ticks,omitempty"`
}

// Bar is a span below a request, of the kinds the waterfall draws.
type Bar struct {
	Kind    string  `json:"kind"` // lock.wait, lock.hold, db.tx, gateway, idempotency
	StartMS float64 `json:"start_ms"`
	MS      float64 `json:"ms"`
	// Result: of a lock.wait, acquired, busy or unavailable; of a
	// lock.hold, lost when the lock was lost; of the idempotency span,
	// the claim's outcome (claimed, replayed, in_progress, …).
	Result string `json:"result,omitempty"`
	Tries  int    `json:"tries,omitempty"`  // a lock.wait's attempts
	Failed bool   `json:"failed,omitempty"` // a transaction rolled back, a call failed
	// Constraint refused the transaction (layer 4).
	Constraint string `json:"constraint,omitempty"`
}

// Tick is an event of a request's spans: a race lost and tried again
// ("retry"), or a layer stopping the work ("stopped").
type Tick struct {
	Kind  string  `json:"kind"`
	AtMS  float64 `json:"at_ms"`
	Layer string  `json:"layer,omitempty"`
}

// How long the lab waits for the spans of a race, and how often it looks.
const (
	spansWait  = 2 * time.Second
	spansPoll  = 100 * time.Millisecond
	spansKept  = 10 * time.Minute
	maxRowBars = 40 // a request with more spans is drawn with its first ones
)

// waterfall waits until the spans of the race's requests have reached the
// store, from every replica, then draws them. Each replica writes its
// spans a few milliseconds after its answers: the lab waits until a span
// of every answered request is there and the count stops growing, or
// spansWait has passed, and draws what there is.
func (r *run) waterfall(ctx context.Context, answered int) (Waterfall, error) {
	store := r.target.Spans
	deadline := time.Now().Add(spansWait)
	last := -1
	for {
		requests, all, err := store.Count(ctx, r.id)
		if err != nil {
			return Waterfall{}, fmt.Errorf("count spans: %w", err)
		}
		if requests >= answered && all == last || time.Now().After(deadline) {
			break
		}
		last = all
		select {
		case <-ctx.Done():
			return Waterfall{}, ctx.Err()
		case <-time.After(spansPoll):
		}
	}
	spans, err := store.Spans(ctx, r.id)
	if err != nil {
		return Waterfall{}, fmt.Errorf("read spans: %w", err)
	}
	return drawWaterfall(spans, answered), nil
}

// drawWaterfall makes the rows of a race's spans: one per server span of
// a request, its start the time axis's zero for the first.
func drawWaterfall(spans []Span, answered int) Waterfall {
	w := Waterfall{Requests: answered, Spans: len(spans), Rows: []Row{}}
	byTrace := map[string][]Span{}
	var roots []Span
	for _, sp := range spans {
		if sp.Kind == "server" && sp.ParentID == "" {
			roots = append(roots, sp)
			continue
		}
		byTrace[sp.TraceID] = append(byTrace[sp.TraceID], sp)
	}
	if len(roots) == 0 {
		return w
	}
	slices.SortFunc(roots, func(a, b Span) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Request, b.Request)) })
	zero := roots[0].Start
	ms := func(t time.Time) float64 { return between(zero, t) }
	var end time.Time
	for _, root := range roots {
		row := Row{I: root.Request, Route: root.Name, Replica: root.Replica, StartMS: ms(root.Start),
			MS: between(root.Start, root.End), Status: attrInt(root, "http.response.status_code"),
			Replayed: attrBool(root, "shop.idempotency.replayed"), Layer: attrString(root, "shop.layer"), Bars: []Bar{}}
		row.LostAtVersion = row.Layer == "version"
		below := byTrace[root.TraceID]
		slices.SortFunc(below, func(a, b Span) int { return a.Start.Compare(b.Start) })
		for _, sp := range append([]Span{root}, below...) {
			end = later(end, sp.End)
			for _, ev := range sp.Events {
				if ev.Name != "retry" && ev.Name != "stopped" {
					continue
				}
				layer, _ := ev.Attrs["shop.layer"].(string)
				row.Ticks = append(row.Ticks, Tick{Kind: ev.Name, AtMS: ms(ev.At), Layer: layer})
				if ev.Name == "retry" && layer == "version" {
					row.LostAtVersion = true
				}
			}
			kind := barKind(sp.Name)
			if sp.SpanID == root.SpanID || kind == "" || len(row.Bars) == maxRowBars {
				continue
			}
			b := Bar{Kind: kind, StartMS: ms(sp.Start), MS: between(sp.Start, sp.End), Failed: sp.Failed,
				Constraint: attrString(sp, "shop.constraint")}
			switch kind {
			case "lock.wait":
				b.Result, b.Tries = attrString(sp, "shop.lock.result"), attrInt(sp, "shop.lock.tries")
				row.Waited = row.Waited || b.Tries > 1
			case "lock.hold":
				if attrBool(sp, "shop.lock.lost") {
					b.Result = "lost"
				}
			case "idempotency":
				b.Result = attrString(sp, "shop.idempotency.outcome")
			}
			row.Bars = append(row.Bars, b)
		}
		w.Rows = append(w.Rows, row)
	}
	w.MS = ms(end)
	return w
}

// barKind is the bar a span is drawn as, "" for none.
func barKind(name string) string {
	switch {
	case name == "lock.wait", name == "lock.hold", name == "db.tx":
		return name
	case strings.HasPrefix(name, "gateway "):
		return "gateway"
	case strings.HasPrefix(name, "idempotency "):
		return "idempotency"
	}
	return ""
}

// between is the time from a to b in milliseconds, to the microsecond.
func between(a, b time.Time) float64 { return float64(b.Sub(a).Microseconds()) / 1000 }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func attrString(sp Span, k string) string {
	s, _ := sp.Attrs[k].(string)
	return s
}

func attrBool(sp Span, k string) bool {
	b, _ := sp.Attrs[k].(bool)
	return b
}

// attrInt reads a number: int64 as recorded, float64 as read back.
func attrInt(sp Span, k string) int {
	switch v := sp.Attrs[k].(type) {
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return 0
}
