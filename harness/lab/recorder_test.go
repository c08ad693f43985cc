package lab

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// heldWriter is a store that takes as long as the test says: each Write
// reports that it began, then waits for release.
type heldWriter struct {
	began   chan struct{}
	release chan struct{}

	mu      sync.Mutex
	written []Span
}

func newHeldWriter() *heldWriter {
	return &heldWriter{began: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (w *heldWriter) Write(ctx context.Context, spans []Span) error {
	w.began <- struct{}{}
	select {
	case <-w.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written = append(w.written, spans...)
	return nil
}

func (w *heldWriter) spans() []Span {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Span(nil), w.written...)
}

// raceSpan is a span of request i of run, as the SDK hands an ended one
// to its processors.
func raceSpan(run string, i int) sdktrace.ReadOnlySpan {
	return tracetest.SpanStub{Name: "POST /v1/orders", Attributes: []attribute.KeyValue{AttrRun.String(run), AttrRequest.Int(i)},
		StartTime: time.Now(), EndTime: time.Now()}.Snapshot()
}

// TestRecorder_NeverWaits: with the store stuck, OnEnd still returns at
// once; what the queue cannot hold is dropped and counted, and what it
// held is written once the store answers.
func TestRecorder_NeverWaits(t *testing.T) {
	w := newHeldWriter()
	m := metrics.New()
	r, err := NewRecorder(w, RecorderOptions{Queue: 8, Batch: 1, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	r.OnEnd(raceSpan("0000000a", 0))
	<-w.began // the writer holds one span, in a write that does not end

	const more = 1000
	begin := time.Now()
	for i := range more {
		r.OnEnd(raceSpan("0000000a", i%MaxSize))
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("%d spans ended in %v with the store stuck: OnEnd waited", more, took)
	}
	if got, want := r.Dropped(), int64(more-8); got != want {
		t.Errorf("dropped %d, want %d: all but the queue's 8", got, want)
	}
	if got := dropped(t, m, "queue_full"); got != more-8 {
		t.Errorf(`shop_lab_spans_dropped_total{reason="queue_full"} = %v, want %d`, got, more-8)
	}
	close(w.release)
	r.Close()
	if n := len(w.spans()); n != 1+8 {
		t.Errorf("%d spans written, want the one held and the queue's 8", n)
	}
}

// TestRecorder_RunsShare: no run keeps more than PerRun spans; another
// run keeps its own.
func TestRecorder_RunsShare(t *testing.T) {
	w := newHeldWriter()
	close(w.release)
	r, err := NewRecorder(w, RecorderOptions{PerRun: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		r.OnEnd(raceSpan("0000000a", i))
	}
	for i := range 3 {
		r.OnEnd(raceSpan("0000000b", i))
	}
	r.OnEnd(tracetest.SpanStub{Name: "GET /v1/products"}.Snapshot()) // no run's: not kept
	r.Close()
	per := map[string]int{}
	for _, sp := range w.spans() {
		per[sp.Run]++
	}
	if per["0000000a"] != 5 || per["0000000b"] != 3 || len(per) != 2 || r.Dropped() != 3 {
		t.Errorf("kept %v, dropped %d; want 5 of run a, 3 of run b, 3 dropped", per, r.Dropped())
	}
}

// TestRecorder_KeepsMarkedRequests: with nothing exported, a provider
// whose Keep is Traced records the spans of a marked request, the
// recorder names their run and request, and nothing else is recorded.
func TestRecorder_KeepsMarkedRequests(t *testing.T) {
	w := newHeldWriter()
	close(w.release)
	r, err := NewRecorder(w, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr, err := tracing.New(context.Background(), tracing.Config{Service: "shop", Instance: "api-1", Keep: Traced,
		Processors: []sdktrace.SpanProcessor{r}})
	if err != nil {
		t.Fatal(err)
	}
	tracer := tr.Provider().Tracer("test")
	ctx, root := tracer.Start(WithMark(context.Background(), Mark{Run: "0000000a", Request: 7}), "POST /v1/orders")
	_, child := tracing.Start(ctx, "db.tx")
	child.End()
	root.End()
	_, other := tracer.Start(context.Background(), "GET /v1/products")
	if other.IsRecording() {
		t.Error("a request with no mark is recorded")
	}
	other.End()
	if err := tr.Shutdown(context.Background()); err != nil { // flushes; the recorder goes on
		t.Fatal(err)
	}
	got := w.spans()
	if len(got) != 2 {
		t.Fatalf("%d spans kept, want the request's and its transaction's: %+v", len(got), got)
	}
	for _, sp := range got {
		if sp.Run != "0000000a" || sp.Request != 7 || sp.Replica != "api-1" {
			t.Errorf("span %s: run %q, request %d, replica %q", sp.Name, sp.Run, sp.Request, sp.Replica)
		}
	}
	if got[0].Name != "db.tx" || got[0].ParentID != got[1].SpanID || got[1].ParentID != "" {
		t.Errorf("the transaction is not the request's child: %+v", got)
	}
}

func TestParseMark(t *testing.T) {
	for v, want := range map[string]bool{
		"0a1b2c3d/0": true, "0a1b2c3d/199": true,
		"0a1b2c3d/200": false, "0A1B2C3D/1": false, "0a1b2c3d": false, "0a1b2c3d/-1": false,
		"0a1b2c3d/1/2": false, "../../etc/1": false, "": false,
	} {
		if _, ok := parseMark(v); ok != want {
			t.Errorf("parseMark(%q) ok=%t, want %t", v, ok, want)
		}
	}
}

// dropped is shop_lab_spans_dropped_total{reason} in m.
func dropped(t *testing.T, m *metrics.Metrics, reason string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "shop_lab_spans_dropped_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no shop_lab_spans_dropped_total{reason=%q}", reason)
	return 0
}

// TestMarkRuns_BeforeTheTracingMiddleware: a race's request marked before
// the copy's echo (MarkRuns, as the live copy's route and a sandbox's
// server run it) has its spans recorded; marked inside the echo, after
// its tracing middleware has asked the sampler, it has none: the span
// was not sampled, and neither is any below it.
func TestMarkRuns_BeforeTheTracingMiddleware(t *testing.T) {
	for _, c := range []struct {
		name  string
		serve func(e *echo.Echo) http.Handler
		want  int // spans kept
	}{
		{"Before", func(e *echo.Echo) http.Handler { return MarkRuns(e) }, 2},
		{"Inside", func(e *echo.Echo) http.Handler {
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error {
					if m, ok := parseMark(c.Request().Header.Get(RunHeader)); ok {
						c.SetRequest(c.Request().WithContext(WithMark(c.Request().Context(), m)))
					}
					return next(c)
				}
			})
			return e
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newHeldWriter()
			close(w.release)
			r, err := NewRecorder(w, RecorderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			tr, err := tracing.New(context.Background(), tracing.Config{Service: "shop", Keep: Traced, Processors: []sdktrace.SpanProcessor{r}})
			if err != nil {
				t.Fatal(err)
			}
			e := httpx.New(metrics.New(), httpx.Options{Tracing: tr.Provider(), Logger: slog.New(slog.DiscardHandler)})
			h := c.serve(e)
			e.GET("/v1/products", func(c echo.Context) error {
				_, span := tracing.Start(c.Request().Context(), "db.tx")
				span.End()
				return c.NoContent(http.StatusOK)
			})
			req := httptest.NewRequest(http.MethodGet, "/v1/products", nil)
			req.Header.Set(RunHeader, "0000000a/3")
			h.ServeHTTP(httptest.NewRecorder(), req)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := len(w.spans()); got != c.want {
				t.Errorf("%d spans kept, want %d", got, c.want)
			}
		})
	}
}
