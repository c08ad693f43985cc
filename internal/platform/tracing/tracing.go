// Package tracing gives every layer a span, so that a request that waited
// or lost a race can be read as a waterfall: the HTTP request, its
// idempotency claim, the lock's wait and hold, each database transaction
// with its retries, the call to the card processor, and, after the commit,
// the relay and the consumers of its events. It is OpenTelemetry
// (go.opentelemetry.io/otel): the SDK's tracer provider and batch span
// processor, exporting OTLP over HTTP.
//
// Tracing is off unless the standard variables ask for an exporter
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; the
// SDK reads the rest: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, …), or a Config.Keep asks for some requests' spans
// (the race lab's). Off, there is no provider at all: Start returns the
// span already in the context, a no-op, without allocating, and the HTTP
// edge installs no middleware.
//
// The packages that make spans take no tracer: Start makes a child of the
// span in the context with the tracer the context carries, which the HTTP
// edge puts there for each request (WithRequest) and a job or a consumer,
// with no request to belong to, for its runs (WithProvider). No global is
// set.
//
// A span whose request lost a race names the layer that stopped it
// (Stopped: shop.layer=version), and so does the request's own span.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of the shop's own spans.
const Scope = "github.com/shop-example/shop"

// FlushTimeout bounds the export of the spans left when a process stops.
const FlushTimeout = 5 * time.Second

// Propagator carries a trace across processes: the W3C traceparent
// header to the card processor and the mail provider, and the same field
// in an event's metadata from the transaction that wrote it to its
// consumers.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Settings are what the standard variables ask of tracing.
type Settings struct {
	// Export: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and neither OTEL_SDK_DISABLED
	// nor OTEL_TRACES_EXPORTER=none says otherwise.
	Export bool
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG; "" samples every trace whose parent is
	// sampled or that has none.
	Sampler, SamplerArg string
}

// SettingsFromEnv reads the standard variables, and refuses a sampler it
// does not know.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	s := Settings{Export: Exporting(getenv), Sampler: getenv("OTEL_TRACES_SAMPLER"), SamplerArg: getenv("OTEL_TRACES_SAMPLER_ARG")}
	_, err := s.sampler()
	return s, err
}

// Config says what to trace.
type Config struct {
	Settings
	// Service is service.name unless OTEL_SERVICE_NAME says otherwise.
	Service string
	// Instance is service.instance.id: the replica's name.
	Instance string
	// Keep, when set, records the spans of the requests whose context it
	// returns true for, even when nothing is exported (the race lab's, on
	// a demo server): its Processors see them.
	Keep func(ctx context.Context) bool
	// Processors see every span recorded, besides the OTLP exporter.
	Processors []sdktrace.SpanProcessor
	// Record samples as Settings.Export does, with or without the OTLP
	// exporter: for Processors that export on their own (tests: an
	// in-memory exporter; the bench: OTLP to a sink of its own).
	Record bool
}

// Tracing is the process's tracer provider, or none.
type Tracing struct {
	sdk       *sdktrace.TracerProvider // nil when off
	exporting bool
}

// Exporting reports whether the standard variables ask for spans to be
// exported.
func Exporting(getenv func(string) string) bool {
	if getenv("OTEL_SDK_DISABLED") == "true" || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// New returns the tracer provider cfg asks for: one exporting OTLP over
// HTTP when the variables say so, one keeping only what cfg.Keep asks
// for, or none.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	exporting := cfg.Export || cfg.Record
	if !exporting && cfg.Keep == nil {
		return &Tracing{}, nil
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.Service), semconv.ServiceInstanceID(cfg.Instance)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, p := range cfg.Processors {
		opts = append(opts, sdktrace.WithSpanProcessor(p))
	}
	if cfg.Export {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	// The standard sampler (OTEL_TRACES_SAMPLER, by default every trace
	// whose parent is sampled or that has none) when exporting;
	// otherwise nothing but what Keep asks for.
	base := sdktrace.NeverSample()
	if exporting {
		if base, err = cfg.sampler(); err != nil {
			return nil, err
		}
	}
	if cfg.Keep != nil {
		base = keeping{keep: cfg.Keep, otherwise: base}
	}
	opts = append(opts, sdktrace.WithSampler(base))
	return &Tracing{sdk: sdktrace.NewTracerProvider(opts...), exporting: exporting}, nil
}

// On reports whether spans are recorded at all.
func (t *Tracing) On() bool { return t != nil && t.sdk != nil }

// Provider is the tracer provider: a no-op one when off.
func (t *Tracing) Provider() trace.TracerProvider {
	if !t.On() {
		return noop.NewTracerProvider()
	}
	return t.sdk
}

// Shutdown exports what is left and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// keeping samples what keep asks for, and leaves the rest to otherwise.
type keeping struct {
	keep      func(context.Context) bool
	otherwise sdktrace.Sampler
}

func (k keeping) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if k.keep(p.ParentContext) {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample,
			Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	}
	return k.otherwise.ShouldSample(p)
}

func (k keeping) Description() string { return "Keep{" + k.otherwise.Description() + "}" }

// scope is what a context carries for the spans made in it: the tracer
// they are made with, and the request's own span, if any.
type scope struct {
	tracer  trace.Tracer
	request trace.Span
}

type scopeKey struct{}

// WithProvider returns ctx carrying tp's tracer, for the spans Start
// makes in it: the roots of a background job's runs and of a consumer's
// deliveries, and their children.
func WithProvider(ctx context.Context, tp trace.TracerProvider) context.Context {
	return context.WithValue(ctx, scopeKey{}, &scope{tracer: tp.Tracer(Scope)})
}

// WithRequest returns ctx carrying tp's tracer and remembering ctx's span
// as the request's own: what Stopped names the layer on, besides the span
// it is called in. The HTTP edge calls it once per request, inside the
// request's span.
func WithRequest(ctx context.Context, tp trace.TracerProvider) context.Context {
	return context.WithValue(ctx, scopeKey{}, &scope{tracer: tp.Tracer(Scope), request: trace.SpanFromContext(ctx)})
}

func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// Start starts a span named name: a child of the span in ctx, or a root,
// with the tracer WithRequest or WithProvider put in ctx. A span whose
// trace is not sampled has only unsampled children, so Start then returns
// ctx and its span as they are, and with no tracer in ctx too: no span is
// made, and nothing allocated.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if sc := parent.SpanContext(); sc.IsValid() && !sc.IsSampled() {
		return ctx, parent
	}
	s := scopeOf(ctx)
	if s == nil {
		if !parent.IsRecording() {
			return ctx, parent
		}
		return parent.TracerProvider().Tracer(Scope).Start(ctx, name, trace.WithAttributes(attrs...))
	}
	return s.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceID is the id of the trace ctx belongs to, "" when it belongs to
// none that is recorded.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}

// sampler is the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// name, as the specification defines them.
func (s Settings) sampler() (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		arg := s.SamplerArg
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG: want a ratio 0–1, got %q", arg)
		}
		return r, nil
	}
	r, err := ratio()
	if err != nil {
		return nil, err
	}
	switch v := s.Sampler; v {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		if v == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER: %q is not a sampler this service knows", v)
	}
}
