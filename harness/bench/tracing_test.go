package bench

import (
	"context"
	"strings"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shop-example/shop/harness/testenv"
)

// TestTracing_SmallRun runs `shop bench tracing` at a tiny size: both
// services place orders, the traced one's spans reach the sink (more than
// one per order: the request, its idempotency claim, its transaction), and
// the report gives the ratio.
func TestTracing_SmallRun(t *testing.T) {
	dbURL, redis := testenv.DatabaseURL(t), testenv.RedisAddrs(t)
	o, err := parseBenchFlags("tracing", []string{
		"-db", dbURL, "-redis", strings.Join(redis, ","),
		"-skus", "20", "-rounds", "1", "-duration", "300ms", "-warmup", "100ms", "-clients", "4",
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := runTracing(context.Background(), o, quietLogger(), &b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"| off/1", "| on/1", "spans exported:", "on/off = "} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
}

// TestTracing_FailsWithoutSpans: a run whose sink received fewer spans
// than the traced service placed orders is refused, not reported.
func TestTracing_FailsWithoutSpans(t *testing.T) {
	var b strings.Builder
	results := []result{{name: "off/1", orders: 10, window: 1e9}, {name: "on/1", orders: 10, window: 1e9}}
	sink := &spanSink{}
	sink.spans.Store(3)
	if err := printTracingReport(&b, benchOptions{runs: 1, skus: 1, clients: 1}, results, 0, sink); err == nil {
		t.Errorf("3 spans for 10 orders reported as a run that traced:\n%s", b.String())
	}
	sink.spans.Store(40)
	if err := printTracingReport(&b, benchOptions{runs: 1, skus: 1, clients: 1}, results, 0, sink); err != nil {
		t.Errorf("40 spans for 10 orders: %v", err)
	}
}

// TestTracing_CountSpans: the sink's count of an export's spans, read off
// its wire format, is the number the export holds.
func TestTracing_CountSpans(t *testing.T) {
	req := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: make([]*tracepb.Span, 3)}, {Spans: make([]*tracepb.Span, 2)}}},
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: make([]*tracepb.Span, 4)}}},
	}}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for i := range ss.Spans {
				ss.Spans[i] = &tracepb.Span{Name: "s", TraceId: make([]byte, 16), SpanId: make([]byte, 8)}
			}
		}
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := countSpans(b); err != nil || n != 9 {
		t.Errorf("countSpans = %d, %v; want 9", n, err)
	}
	if _, err := countSpans(b[:len(b)-3]); err == nil {
		t.Error("a cut export was counted")
	}
}
