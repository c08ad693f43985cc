package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// Inject writes ctx's trace into fields (an event's metadata), under the
// W3C names (traceparent, tracestate).
func Inject(ctx context.Context, fields map[string]string) {
	Propagator.Inject(ctx, propagation.MapCarrier(fields))
}

// Extract returns ctx continuing the trace fields carry, if any.
func Extract(ctx context.Context, fields map[string]string) context.Context {
	return Propagator.Extract(ctx, propagation.MapCarrier(fields))
}

// InjectHeader writes ctx's trace into an outgoing request's headers
// (traceparent): the card processor's and the mail provider's spans
// continue the caller's trace.
func InjectHeader(ctx context.Context, h http.Header) {
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}
