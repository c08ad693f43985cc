package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shop-example/shop/internal/platform/tracing"
)

func TestSettings_Sampler(t *testing.T) {
	for _, c := range []struct {
		sampler, arg string
		ok           bool
	}{
		{"", "", true}, {"always_on", "", true}, {"always_off", "", true}, {"parentbased_always_off", "", true},
		{"traceidratio", "0.1", true}, {"parentbased_traceidratio", "1", true},
		{"sometimes", "", false}, {"traceidratio", "2", false}, {"traceidratio", "half", false},
	} {
		_, err := tracing.SettingsFromEnv(func(k string) string {
			return map[string]string{"OTEL_TRACES_SAMPLER": c.sampler, "OTEL_TRACES_SAMPLER_ARG": c.arg}[k]
		})
		if (err == nil) != c.ok {
			t.Errorf("sampler %q arg %q: err %v, want ok %v", c.sampler, c.arg, err, c.ok)
		}
	}
}

// TestStart_OffIsFree: with no provider anywhere, Start hands back the
// context it was given, and allocates nothing.
func TestStart_OffIsFree(t *testing.T) {
	ctx := context.Background()
	got, span := tracing.Start(ctx, "nothing")
	if got != ctx || span.IsRecording() {
		t.Fatalf("Start without a provider made a span: recording %v", span.IsRecording())
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = tracing.Start(ctx, "nothing") }); n != 0 {
		t.Errorf("Start without a provider allocates %.0f times", n)
	}
	off, err := tracing.New(ctx, tracing.Config{Service: "test"})
	if err != nil || off.On() {
		t.Fatalf("New with nothing asked: on %v, err %v", off.On(), err)
	}
}

// TestStopped_NamesTheLayer: the layer goes on the span it is called in
// and on the request's span; the log line of that context names its trace.
func TestStopped_NamesTheLayer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Config{Service: "test", Record: true,
		Processors: []sdktrace.SpanProcessor{sdktrace.NewSimpleSpanProcessor(exp)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.WithProvider(context.Background(), tr.Provider())
	ctx, req := tracing.Start(ctx, "request")
	ctx = tracing.WithRequest(ctx, tr.Provider())
	inner, tx := tracing.Start(ctx, "db.tx")
	tracing.Stopped(inner, "version")
	var logs bytes.Buffer
	slog.New(tracing.LogHandler(slog.NewTextHandler(&logs, nil))).InfoContext(inner, "lost")
	tx.End()
	req.End()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, sp := range spans {
		found := false
		for _, kv := range sp.Attributes {
			found = found || (kv.Key == tracing.AttrLayer && kv.Value.AsString() == "version")
		}
		if !found {
			t.Errorf("span %s does not name the layer: %v", sp.Name, sp.Attributes)
		}
	}
	if id := tracing.TraceID(inner); id == "" || !strings.Contains(logs.String(), "trace_id="+id) {
		t.Errorf("log line %q does not name trace %q", logs.String(), id)
	}
}
