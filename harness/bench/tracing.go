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
// The sink counts the spans of every export by walking its wire format,
// without decoding it, in this process: what it costs is counted against
// tracing. A run whose sink received
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
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/internal/app"
)

const (
	tracingBlock         = "benchmarks/tracing"
	defaultTracingRounds = 10
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
		sc := scenario{name: name, skus: fx.skus[3], order: off.order}
		if strings.HasPrefix(name, "on/") {
			// -cpuprofile profiles the rounds with tracing on.
			sc.order, sc.layered = on.order, true
		}
		scenarios = append(scenarios, sc)
	}
	// A round of each first, measured and dropped: the first round of a
	// fresh service opens its pool's connections and fills the caches,
	// and would fall on the service that happens to run first.
	warm := []scenario{{name: "warm/off", skus: fx.skus[2], order: off.order}, {name: "warm/on", skus: fx.skus[2], order: on.order}}
	warmed, err := runScenarios(ctx, pool, o, warm, logger)
	if err != nil {
		return err
	}
	var results []result
	for _, sc := range scenarios {
		// Fresh statistics before each round: a plan that a service's
		// connections cached while the orders table was small (the first
		// round's) would otherwise slow that service alone as it grows.
		if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
			return fmt.Errorf("analyze: %w", err)
		}
		r, err := runScenarios(ctx, pool, o, []scenario{sc}, logger)
		if err != nil {
			return err
		}
		results = append(results, r...)
	}
	flush, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := exported.ForceFlush(flush); err != nil {
		return fmt.Errorf("flush the spans: %w", err)
	}
	var report strings.Builder
	err = printTracingReport(&report, o, results, warmed[1].orders, sink)
	fmt.Fprint(w, report.String())
	if err != nil {
		return err
	}
	return o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: tracingBlock, Rows: resultNames(results), Body: asMarkdown(report.String())})
}

// printTracingReport writes the rounds, the ratio of the services'
// throughputs and the spans the sink received; it fails a run that did
// not trace. warmOrders are those of the traced service's warm round.
func printTracingReport(w io.Writer, o benchOptions, results []result, warmOrders int, sink *spanSink) error {
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
	fmt.Fprintf(w, "spans exported: %d in %d exports, %.1f per order measured with tracing on (the warm-ups' orders, not counted, made spans too)\n",
		spans, exports, float64(spans)/float64(max(onOrders+warmOrders, 1)))
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
	// Each round's pair, on over the off round just before it: how far
	// the box moved between rounds, against the cost measured.
	var pairs []float64
	for i := 1; i < len(results); i += 2 {
		if off, on := results[i-1], results[i]; off.rate() > 0 {
			pairs = append(pairs, on.rate()/off.rate())
		}
	}
	slices.Sort(pairs)
	fmt.Fprintf(w, "on/off of each round: median %.3f, from %.3f to %.3f\n", pairs[len(pairs)/2], pairs[0], pairs[len(pairs)-1])
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
	var n int64
	if err == nil {
		n, err = countSpans(body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.spans.Add(n)
	s.exports.Add(1)
	// An empty ExportTraceServiceResponse: every span taken.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func (s *spanSink) close() { _ = s.srv.Close() }

// The fields of an OTLP export that hold spans: ExportTraceServiceRequest
// .resource_spans (1), ResourceSpans.scope_spans (2), ScopeSpans.spans (2).
var spanPath = []protowire.Number{1, 2, 2}

// countSpans counts the spans of an OTLP/protobuf export by walking its
// wire format, without decoding it: what a collector on another machine
// would spend decoding is not the service's cost.
func countSpans(b []byte) (int64, error) {
	return countAt(b, spanPath)
}

func countAt(b []byte, path []protowire.Number) (int64, error) {
	var n int64
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if typ != protowire.BytesType || num != path[0] {
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return 0, protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if len(path) == 1 {
			n++
			continue
		}
		k, err := countAt(v, path[1:])
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}
