package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// HeaderRequestID carries the request id in both directions.
const HeaderRequestID = "X-Request-ID"

// withStandardHeaders gives every answer, errors and replays included, the
// headers no route may go without. nosniff: a browser never reads a JSON
// body as HTML or script. no-store: no cache keeps an answer, since one
// carries a new user's token and others a user's orders and payments. They
// are set before the handler runs, so an error rendered later keeps them.
func withStandardHeaders() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set(echo.HeaderXContentTypeOptions, "nosniff")
			h.Set(echo.HeaderCacheControl, "no-store")
			return next(c)
		}
	}
}

// withParsableQuery refuses a request whose query string cannot be parsed
// (a '%' not followed by two hex digits, a ';'), before any route reads
// it. net/url drops the pairs it cannot parse, so a route would otherwise
// read the query as if they had not been sent: GET /v1/orders?cursor=%%%
// answered the first page.
func withParsableQuery() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if _, err := url.ParseQuery(c.Request().URL.RawQuery); err != nil {
				return problem.Errorf(problem.Invalid, "query string cannot be parsed: %v", err)
			}
			return next(c)
		}
	}
}

type requestIDKey struct{}

// An inbound request id is reused only when it looks like one: echo's own
// middleware copies any header value into logs and responses unchecked.
var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// WithRequestID gives every request an id, reusing a well-formed inbound
// X-Request-ID, and puts it in the response, the echo context and the
// request's context (so loggers deep in a flow can reach it).
func WithRequestID() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id := c.Request().Header.Get(HeaderRequestID)
			if !validRequestID.MatchString(id) {
				id = uuid.NewString()
			}
			c.Response().Header().Set(HeaderRequestID, id)
			ctx := context.WithValue(c.Request().Context(), requestIDKey{}, id)
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}

// serverSpans gives every request but a health probe a server span,
// named by its method and route ("POST /v1/orders/:id/payments"), that
// continues the caller's trace (traceparent), with the attributes of the
// HTTP semantic conventions that a reader of a race needs: the method,
// the route and the status. It puts the tracer and the request's span
// into the request's context (tracing.WithRequest), so that every layer
// below makes its spans in the trace and names itself on it when it
// stops the request (tracing.Stopped).
//
// It is the shop's own, not otelecho: that middleware records eight more
// attributes of every request (peer address and port, host, user agent,
// …), and in `shop bench tracing` they were what put tracing's price past
// its goal (docs/DESIGN.md §10). Outside observe, so that the span covers the whole answer, its
// error rendered, and the log line and the latency's exemplar carry its
// trace.
func serverSpans(tp trace.TracerProvider) echo.MiddlewareFunc {
	tracer := tp.Tracer(tracing.Scope)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if probe(c) {
				return next(c)
			}
			req := c.Request()
			route := c.Path()
			ctx := tracing.Propagator.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
			ctx, span := tracer.Start(ctx, req.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(semconv.HTTPRequestMethodKey.String(req.Method), semconv.HTTPRoute(route)))
			c.SetRequest(req.WithContext(tracing.WithRequest(ctx, tp)))
			err := next(c)
			status := c.Response().Status
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			span.End()
			return err
		}
	}
}

// probe reports whether c is a health probe: a balancer's or an
// orchestrator's, every second or so, and no trace of its own.
func probe(c echo.Context) bool {
	switch c.Path() {
	case "/healthz", "/readyz":
		return true
	}
	return false
}

// RequestID returns the id WithRequestID gave the request.
func RequestID(c echo.Context) string {
	return RequestIDFrom(c.Request().Context())
}

// RequestIDFrom returns the request id carried by ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// httpMetrics are the RED metrics of the HTTP edge.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// lastExemplar is when a latency was last observed with its trace
	// (unix nanoseconds).
	lastExemplar atomic.Int64
}

// exemplarEvery paces the latency's exemplars: a bucket keeps only its
// last one, and a scrape every few seconds reads it, so one request in
// each exemplarEvery carries its trace, and every slow one.
const exemplarEvery = 100 * time.Millisecond

// exemplarDue reports whether a request that began at start and took
// elapsed is observed with its trace.
func (h *httpMetrics) exemplarDue(start time.Time, elapsed time.Duration) bool {
	now := start.Add(elapsed).UnixNano()
	last := h.lastExemplar.Load()
	if elapsed < exemplarEvery && now-last < int64(exemplarEvery) {
		return false
	}
	return h.lastExemplar.CompareAndSwap(last, now) || elapsed >= exemplarEvery
}

func newHTTPMetrics(m *metrics.Metrics) *httpMetrics {
	h := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_http_requests_total",
			Help: "HTTP requests by method, route and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shop_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
	}
	m.Registry.MustRegister(h.requests, h.duration)
	return h
}

// StatusClientClosedRequest is the status a request is logged and counted
// with when its client had gone before the answer (nginx's 499). No
// client ever receives it.
const StatusClientClosedRequest = 499

// observe logs and measures every request after the error handler has
// written its answer, so the status is the one the client saw.
//
// A request whose client had gone (its context cancelled: the connection
// closed, or the client gave up while this replica was paused) and whose
// work then failed is logged as 499 at INFO, with the error, and counted
// under status 499: the failure is the client's absence, not a fault of
// the service, and a 500 at ERROR would page someone for it. An answer
// the handler gave (a 404, a 409) keeps its status.
func observe(logger *slog.Logger, hm *httpMetrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			// The client's context: the timeout middleware further in
			// replaces the request's with one it cancels on its way out.
			client := c.Request().Context()
			err := next(c)
			gone := err != nil && errors.Is(client.Err(), context.Canceled) && StatusOf(err) >= 500
			switch {
			case gone:
				if !c.Response().Committed {
					c.Response().WriteHeader(StatusClientClosedRequest)
				}
			case err != nil:
				c.Error(err)
			}
			elapsed := time.Since(start)
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			status := c.Response().Status
			hm.requests.WithLabelValues(c.Request().Method, route, strconv.Itoa(status)).Inc()
			latency := hm.duration.WithLabelValues(c.Request().Method, route)
			if id := tracing.TraceID(client); id != "" && hm.exemplarDue(start, elapsed) {
				// The exemplar: this request's trace, in its bucket.
				latency.(prometheus.ExemplarObserver).ObserveWithExemplar(elapsed.Seconds(), prometheus.Labels{"trace_id": id})
			} else {
				latency.Observe(elapsed.Seconds())
			}
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelError
			}
			attrs := []slog.Attr{
				slog.String("request_id", RequestID(c)),
				slog.String("method", c.Request().Method),
				slog.String("route", route),
				slog.Int("status", status),
				slog.Duration("elapsed", elapsed),
			}
			if gone {
				attrs = append(attrs, slog.String("err", err.Error()))
			}
			logger.LogAttrs(client, level, "request", attrs...)
			return nil
		}
	}
}
