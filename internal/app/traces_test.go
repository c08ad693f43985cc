package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
)

// The spans of every layer (package tracing), read from an in-memory
// exporter that every replica's provider hands each span to as it ends.

// spans is what the exporter holds, with the lookups the tests need.
type spans struct {
	t   *testing.T
	all tracetest.SpanStubs
}

func collected(t *testing.T, exp *tracetest.InMemoryExporter) spans {
	t.Helper()
	return spans{t: t, all: exp.GetSpans()}
}

// server is the server span of the request whose route is route, the
// last one if several.
func (s spans) server(route string) tracetest.SpanStub {
	s.t.Helper()
	for i := len(s.all) - 1; i >= 0; i-- {
		if sp := s.all[i]; sp.SpanKind == trace.SpanKindServer && sp.Name == route {
			return sp
		}
	}
	s.t.Fatalf("no server span %q among %s", route, s.names())
	return tracetest.SpanStub{}
}

// under returns the spans of parent's trace below it, at any depth.
func (s spans) under(parent tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	below := map[trace.SpanID]bool{parent.SpanContext.SpanID(): true}
	for changed := true; changed; {
		changed = false
		for _, sp := range s.all {
			id := sp.SpanContext.SpanID()
			if sp.SpanContext.TraceID() == parent.SpanContext.TraceID() && below[sp.Parent.SpanID()] && !below[id] {
				below[id] = true
				out = append(out, sp)
				changed = true
			}
		}
	}
	return out
}

// child is the span named name below parent.
func (s spans) child(parent tracetest.SpanStub, name string) tracetest.SpanStub {
	s.t.Helper()
	for _, sp := range s.under(parent) {
		if sp.Name == name {
			return sp
		}
	}
	var names []string
	for _, sp := range s.under(parent) {
		names = append(names, sp.Name)
	}
	s.t.Fatalf("%s has no span %q below it; it has %v", parent.Name, name, names)
	return tracetest.SpanStub{}
}

func (s spans) names() []string {
	var out []string
	for _, sp := range s.all {
		out = append(out, sp.Name)
	}
	return out
}

// attr is the value of sp's attribute key, "" when it has none.
func attr(sp tracetest.SpanStub, key string) string {
	for _, kv := range sp.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// wantAttrs fails unless sp has each attribute with its value.
func wantAttrs(t *testing.T, sp tracetest.SpanStub, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		if got := attr(sp, string(kv.Key)); got != kv.Value.Emit() {
			t.Errorf("span %s: %s = %q, want %q", sp.Name, kv.Key, got, kv.Value.Emit())
		}
	}
}

func tracedEnv(t *testing.T, vars map[string]string) (*apptest.Env, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	e := apptest.NewWith(t, 1, vars, app.Deps{SpanProcessor: sdktrace.NewSimpleSpanProcessor(exp)})
	return e, exp
}

// TestTraces_OrderCreated: a keyed order is a server span, below it the
// idempotency span that claimed the key and stored the answer, and the
// transaction that did both; its replay names the layer that answered it.
func TestTraces_OrderCreated(t *testing.T) {
	e, exp := tracedEnv(t, nil)
	apptest.MustCreateProduct(t, e.R(0), "TR-ORDER", 500, 5)
	u := apptest.MustCreateUser(t, e.R(0), "tracer")
	exp.Reset()

	body := apptest.OrderBody(apptest.Line{SKU: "TR-ORDER", Quantity: 1})
	apptest.WantStatus(t, e.R(0).Do(t, http.MethodPost, "/v1/orders", u.Token, body, "Idempotency-Key", "tr-1"), http.StatusCreated)
	s := collected(t, exp)
	req := s.server("POST /v1/orders")
	wantAttrs(t, req, attribute.Int("http.response.status_code", http.StatusCreated))
	idem := s.child(req, "idempotency create_order")
	wantAttrs(t, idem, attribute.String("shop.idempotency.outcome", "claimed"), attribute.String("shop.idempotency.result", "stored"),
		attribute.String("shop.idempotency.key", "tr-1"), attribute.Bool("shop.idempotency.stored", true))
	tx := s.child(idem, "db.tx")
	if tx.Status.Code.String() == "Error" {
		t.Errorf("the order's transaction failed: %v", tx.Status)
	}

	exp.Reset()
	res := e.R(0).Do(t, http.MethodPost, "/v1/orders", u.Token, body, "Idempotency-Key", "tr-1")
	apptest.WantStatus(t, res, http.StatusCreated)
	s = collected(t, exp)
	req = s.server("POST /v1/orders")
	wantAttrs(t, req, attribute.String("shop.layer", "idempotency"), attribute.Bool("shop.idempotency.replayed", true))
	wantAttrs(t, s.child(req, "idempotency create_order"), attribute.String("shop.idempotency.outcome", "replayed"))
}

// TestTraces_PaymentAndItsEvents: a payment's trace holds its lock's wait
// and hold, its transactions and the call to the card processor with its
// key; the gateway's own span continues it (traceparent), and so do the
// relay's publish of order.paid and the consumers' deliveries, after the
// commit.
func TestTraces_PaymentAndItsEvents(t *testing.T) {
	e, exp := tracedEnv(t, eventVars)
	runEvents(t, e)
	apptest.MustCreateProduct(t, e.R(0), "TR-PAY", 900, 5)
	u := apptest.MustCreateUser(t, e.R(0), "payer")
	o := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "TR-PAY", Quantity: 1})
	exp.Reset()

	apptest.WantStatus(t, payReq(t, e.R(0), u.Token, o.ID, gateway.MethodOK, "tr-pay"), http.StatusCreated)
	if !waitFor(20*time.Second, func() bool {
		n := 0
		for _, sp := range collected(t, exp).all {
			if sp.Name == "consume order.paid" {
				n++
			}
		}
		return n == 2
	}) {
		t.Fatalf("not both consumers' spans within 20 s: %v", collected(t, exp).names())
	}
	s := collected(t, exp)
	req := s.server("POST /v1/orders/:id/payments")
	s.child(req, "idempotency pay_order")
	wait := s.child(req, "lock.wait")
	wantAttrs(t, wait, attribute.String("shop.lock.key", "payment:"+o.ID), attribute.String("shop.lock.result", "acquired"),
		attribute.Int("shop.lock.nodes", 3), attribute.Int("shop.lock.nodes_answered", 3))
	hold := s.child(req, "lock.hold")
	wantAttrs(t, hold, attribute.Bool("shop.lock.lost", false))
	charge := s.child(hold, "gateway /v1/charges")
	if attr(charge, "shop.gateway.idempotency_key") == "" {
		t.Errorf("the gateway call names no idempotency key: %v", charge.Attributes)
	}
	if n := len(slices.DeleteFunc(s.under(hold), func(sp tracetest.SpanStub) bool { return sp.Name != "db.tx" })); n == 0 {
		t.Error("no transaction under the payment's lock")
	}
	publish := s.child(req, "outbox publish")
	wantAttrs(t, publish, attribute.String("shop.event", "order.paid"))
	consumed := map[string]tracetest.SpanStub{}
	for _, sp := range s.under(req) {
		if sp.Name == "consume order.paid" {
			consumed[attr(sp, "shop.consumer")] = sp
		}
	}
	for _, c := range []string{"fulfilment", "mailer"} {
		if attr(consumed[c], "shop.consumer.outcome") != "processed" {
			t.Errorf("%s's delivery, in the payment's trace: %v", c, consumed[c].Attributes)
		}
	}
	// The fulfilment's lock is the order's advisory lock, in its
	// transaction: no Redis lock.
	s.child(consumed["fulfilment"], "db.tx")
	for _, sp := range s.under(consumed["fulfilment"]) {
		if sp.Name == "lock.wait" {
			t.Error("the fulfilment waited on a Redis lock; its lock is in its transaction")
		}
	}
}

// TestTraces_RefusedByTheState: a request the state rule refuses names the
// layer on its span, and its problem+json answer carries its trace's id.
func TestTraces_RefusedByTheState(t *testing.T) {
	e, exp := tracedEnv(t, nil)
	apptest.MustCreateProduct(t, e.R(0), "TR-STATE", 900, 5)
	u := apptest.MustCreateUser(t, e.R(0), "canceller")
	o := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "TR-STATE", Quantity: 1})
	apptest.WantStatus(t, payReq(t, e.R(0), u.Token, o.ID, gateway.MethodOK, "tr-state"), http.StatusCreated)
	exp.Reset()

	res := e.R(0).Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil)
	apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
	s := collected(t, exp)
	req := s.server("POST /v1/orders/:id/cancel")
	wantAttrs(t, req, attribute.String("shop.layer", "state"))
	if got, want := res.Problem().TraceID, req.SpanContext.TraceID().String(); got != want {
		t.Errorf("problem's trace_id %q, want the request's trace %q", got, want)
	}
}

// TestTraces_SeatsAndLikes: a seat hold and a like, each a server span
// with its transaction below it.
func TestTraces_SeatsAndLikes(t *testing.T) {
	e, exp := tracedEnv(t, nil)
	u := apptest.MustCreateUser(t, e.R(0), "fan")
	ev := apptest.MustCreateEvent(t, e.R(0), "traced", 1, 4)
	post := apptest.MustCreatePost(t, e.R(0), u.Token, "traced")
	exp.Reset()

	apptest.WantStatus(t, apptest.HoldSeats(t, e.R(0), u.Token, ev.ID, "tr-hold", "A1", "A2"), http.StatusCreated)
	apptest.WantStatus(t, apptest.SetLike(t, e.R(0), u.Token, post.ID, true), http.StatusOK)
	s := collected(t, exp)
	hold := s.server("POST /v1/events/:id/holds")
	s.child(s.child(hold, "idempotency hold_seats"), "db.tx")
	s.child(s.server("PUT /v1/posts/:id/like"), "db.tx")
}

// TestTraces_Exemplars: the latency histogram's exemplar names a
// request's trace (OpenMetrics).
func TestTraces_Exemplars(t *testing.T) {
	e, exp := tracedEnv(t, nil)
	u := apptest.MustCreateUser(t, e.R(0), "exemplar")
	// One request in each 100 ms carries its trace (httpx.exemplarEvery).
	time.Sleep(150 * time.Millisecond)
	apptest.MustCreatePost(t, e.R(0), u.Token, "exemplar")
	req := collected(t, exp).server("POST /v1/posts")
	r, err := http.NewRequestWithContext(context.Background(), http.MethodGet, e.R(0).MetricsURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	want := fmt.Sprintf(`trace_id="%s"`, req.SpanContext.TraceID())
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "shop_http_request_duration_seconds_bucket{") && strings.Contains(line, `route="/v1/posts"`) && strings.Contains(line, want) {
			return
		}
	}
	t.Errorf("no bucket of POST /v1/posts has the exemplar %s", want)
}

// TestTraces_OffByDefault: without the variables, no span and no
// trace_id.
func TestTraces_OffByDefault(t *testing.T) {
	e := apptest.New(t, 1, nil)
	res := e.R(0).Do(t, http.MethodGet, "/v1/orders/00000000-0000-0000-0000-000000000000", "", nil)
	if res.Problem().TraceID != "" {
		t.Errorf("trace_id %q with tracing off", res.Problem().TraceID)
	}
}

// TestTraces_LosersNameTheirLayer: cancels of one order race with the
// lock off; the losers' spans say what stopped them: a retry after the
// version check refused a write (an event naming the layer), then the
// state rule on the order read again (shop.layer=state on the request).
func TestTraces_LosersNameTheirLayer(t *testing.T) {
	const orders, cancels = 10, 8
	exp := tracetest.NewInMemoryExporter()
	e := apptest.NewWith(t, 1, nil, app.Deps{SpanProcessor: sdktrace.NewSimpleSpanProcessor(exp), Variants: variants.For(layers.Off(layers.Lock), "", nil)})
	apptest.MustCreateProduct(t, e.R(0), "TR-RACE", 100, orders)
	u := apptest.MustCreateUser(t, e.R(0), "racer")
	var ids []string
	for range orders {
		ids = append(ids, apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "TR-RACE", Quantity: 1}).ID)
	}
	exp.Reset()
	testenv.Together(orders*cancels, func(i int) {
		apptest.WantStatus(t, e.R(0).Do(t, http.MethodPost, "/v1/orders/"+ids[i/cancels]+"/cancel", u.Token, nil), http.StatusOK)
	})
	layerOf := map[string]int{}
	retried := 0
	for _, sp := range collected(t, exp).all {
		if sp.SpanKind != trace.SpanKindServer {
			continue
		}
		layerOf[attr(sp, "shop.layer")]++
		for _, ev := range sp.Events {
			if ev.Name == "retry" && slices.Contains(ev.Attributes, attribute.String("shop.layer", "version")) {
				retried++
			}
		}
	}
	t.Logf("%d cancels: by the layer named on their span %v; retries after the version check %d", orders*cancels, layerOf, retried)
	if layerOf[""] != orders {
		t.Errorf("%d cancels name no layer, want the %d winners", layerOf[""], orders)
	}
	if layerOf["state"] != orders*(cancels-1) {
		t.Errorf("%d cancels name the state rule, want every loser's %d", layerOf["state"], orders*(cancels-1))
	}
	if retried == 0 {
		t.Error("no cancel was retried after the version check refused its write: the race did not happen")
	}
}

// TestTraces_ProbesMakeNone: a balancer's health probes, every second,
// are no traces.
func TestTraces_ProbesMakeNone(t *testing.T) {
	e, exp := tracedEnv(t, nil)
	exp.Reset()
	for _, path := range []string{"/healthz", "/readyz"} {
		apptest.WantStatus(t, e.R(0).Do(t, http.MethodGet, path, "", nil), http.StatusOK)
	}
	if names := collected(t, exp).names(); len(names) != 0 {
		t.Errorf("the probes made spans: %v", names)
	}
}
