package bench

// `shop bench tracing` measures what the spans cost (package tracing): the
// layered order flow, spread over -skus SKUs, against two services in the
// same process on the same scratch database, one with tracing off (the
// default: no provider, no middleware) and one recording every span and
// exporting it over OTLP/HTTP, as OTEL_EXPORTER_OTLP_ENDPOINT would, to a
// sink of the bench's own on a loopback port. The services take turns,
// -rounds times each, so that a drift of the box (its other work, the
// database's growth) falls on both; the figure is the ratio of their
// summed throughputs.
//
// The sink decodes every export and counts its spans, in this process:
// what it costs is counted against tracing, so the ratio is an upper bound
// of the cost of a collector on another machine. A run whose sink received
// no span, or fewer spans than orders, fails: it did not trace.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/docblock"
)

const (
	tracingBlock         = "benchmarks/tracing"
	defaultTracingRounds = 3
	// tracingGoal: tracing on keeps 95 % of the throughput of tracing off.
	tracingGoal = 0.95
)

// tracingRowNames are the rows of the bench's table: each round of each
// service, in the order they ran.
func tracingRowNames(rounds int) []string {
	var names []string
	for i := 1; i <= rounds; i++ {
		names = append(names, fmt.Sprintf("off/%d", i), fmt.Sprintf("on/%d", i))
	}
	return names
}

func benchTracing(ctx context.Context, o benchOptions, logger *slog.Logger) error {
	return runTracing(ctx, o, logger, os.Stdout)
}

// runTracing is benchTracing, its report written to w.
func runTracing(ctx context.Context, o benchOptions, logger *slog.Logger, w io.Writer) (err error) {
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	fx, err := seedBench(ctx, pool, o)
	if err != nil {
		return err
	}
	sink, err := startSpanSink()
	if err != nil {
		return err
	}
	defer sink.close()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(sink.url), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return fmt.Errorf("OTLP exporter: %w", err)
	}
	exported := sdktrace.NewBatchSpanProcessor(exp)

	off, err := startService(ctx, o, db.url, "", fx.tokens)
	if err != nil {
		return err
	}
	defer off.stop()
	on, err := startServiceWith(ctx, o, db.url, "", fx.tokens, app.Deps{SpanProcessor: exported})
	if err != nil {
		return err
	}
	defer on.stop()

	var scenarios []scenario
	for _, name := range tracingRowNames(o.runs) {
		sc := scenario{name: name, skus: fx.skus[3], order: off.order, layered: true}
		if strings.HasPrefix(name, "on/") {
			sc.order = on.order
		}
		scenarios = append(scenarios, sc)
	}
	results, err := runScenarios(ctx, pool, o, scenarios, logger)
	if err != nil {
		return err
	}
	flush, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := exported.ForceFlush(flush); err != nil {
		return fmt.Errorf("flush the spans: %w", err)
	}
	var report strings.Builder
	err = printTracingReport(&report, o, results, sink)
	fmt.Fprint(w, report.String())
	if err != nil {
		return err
	}
	return o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: tracingBlock, Rows: resultNames(results), Body: asMarkdown(report.String())})
}

// printTracingReport writes the rounds, the ratio of the services'
// throughputs and the spans the sink received; it fails a run that did
// not trace.
func printTracingReport(w io.Writer, o benchOptions, results []result, sink *spanSink) error {
	fmt.Fprintf(w, "\nshop bench tracing: the layered order flow, spread over %d SKUs, %d clients, %s measured after %s warmup per round; "+
		"tracing off, then every span recorded and exported over OTLP/HTTP to a sink in this process, %d rounds each; %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.skus, o.clients, o.duration, o.warmup, o.runs, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	printScenarios(w, "orders/s", results)
	var offOrders, onOrders int
	var offTime, onTime time.Duration
	for _, r := range results {
		if strings.HasPrefix(r.name, "on/") {
			onOrders, onTime = onOrders+r.orders, onTime+r.window
		} else {
			offOrders, offTime = offOrders+r.orders, offTime+r.window
		}
	}
	spans, exports := sink.spans.Load(), sink.exports.Load()
	fmt.Fprintf(w, "spans exported: %d in %d exports, %.1f per order of the rounds with tracing on (warm-ups included)\n", spans, exports, float64(spans)/float64(max(onOrders, 1)))
	if offOrders == 0 || onOrders == 0 {
		return errors.New("bench tracing: a service placed no order")
	}
	if spans < int64(onOrders) {
		return fmt.Errorf("bench tracing: the sink received %d spans for %d orders: the service did not trace", spans, onOrders)
	}
	ratio := (float64(onOrders) / onTime.Seconds()) / (float64(offOrders) / offTime.Seconds())
	verdict := "MET"
	if ratio < tracingGoal {
		verdict = "NOT MET"
	}
	fmt.Fprintf(w, "on/off = %.3f (throughput with tracing, over all rounds): goal (>= %.2f, a cost under %.0f %%) %s\n",
		ratio, tracingGoal, 100*(1-tracingGoal), verdict)
	return nil
}

// spanSink is an OTLP/HTTP receiver that decodes each export, counts its
// spans and keeps nothing.
type spanSink struct {
	url            string
	srv            *http.Server
	spans, exports atomic.Int64
}

func startSpanSink() (*spanSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &spanSink{url: "http://" + ln.Addr().String() + "/v1/traces"}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.export), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *spanSink) export(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	s.exports.Add(1)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (s *spanSink) close() { _ = s.srv.Close() }
