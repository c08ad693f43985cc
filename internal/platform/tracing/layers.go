package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attributes of the shop's spans.
const (
	// AttrLayer names the layer that stopped a request that lost a race:
	// idempotency, lock, state, version, constraint.
	AttrLayer = attribute.Key("shop.layer")
	// AttrReplayed marks a request answered from its key's record.
	AttrReplayed = attribute.Key("shop.idempotency.replayed")
)

// Stopped records that layer stopped the work of ctx's span: the
// attribute shop.layer on it and on the request's span, and an event
// "stopped" at the moment.
func Stopped(ctx context.Context, layer string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attr := AttrLayer.String(layer)
	span.SetAttributes(attr)
	span.AddEvent("stopped", trace.WithAttributes(attr))
	if s := scopeOf(ctx); s != nil && s.request != nil && s.request != span {
		s.request.SetAttributes(attr)
	}
}

// Event adds an event named name to ctx's span.
func Event(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// Set sets attributes on ctx's span.
func Set(ctx context.Context, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrs...)
	}
}

// SetRequest sets attributes on the request's span (WithRequest).
func SetRequest(ctx context.Context, attrs ...attribute.KeyValue) {
	if s := scopeOf(ctx); s != nil && s.request != nil {
		s.request.SetAttributes(attrs...)
	}
}
