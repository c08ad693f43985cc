// Package httpx is the HTTP edge shared by every flow: the echo setup with
// its middleware, problem+json errors, strict JSON binding, and a server
// with timeouts and graceful shutdown.
package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/metrics"
)

const (
	// BodyLimit is the largest request body accepted (API.md: 64 KiB).
	// Spelled KiB: echo's size parser reads "64K" as 64,000 bytes.
	BodyLimit = "64KiB"
	// retryAfterUnavailable is what a client is told to wait after a 503.
	retryAfterUnavailable = 2 * time.Second
	// WriteTimeout bounds a whole exchange on the server: it outlasts the
	// longest request timeout (config.MaxRequestTimeout) and its answer.
	WriteTimeout = 30 * time.Second
)

// Options configure the echo instance.
type Options struct {
	Logger *slog.Logger
	// RequestTimeout bounds each handler through its context
	// (middleware.ContextTimeout). Handlers pass c.Request().Context() down
	// to pgx, Redis and HTTP clients, so the deadline reaches them.
	RequestTimeout time.Duration
	// TrustedProxies are the peers (the load balancer) whose
	// X-Forwarded-For names the client (SHOP_TRUSTED_PROXIES). Empty: the
	// client is the socket's peer, and the header is ignored.
	TrustedProxies []netip.Prefix
	// Tracing, when set, gives every request a span (serverSpans) that
	// continues the caller's trace (traceparent), and every problem
	// answer its trace_id; nil traces nothing, at no cost.
	Tracing trace.TracerProvider
}

// New returns an echo instance with the shared middleware in place:
// standard headers, request id, recover, logging and metrics, a query
// string that parses, body limit and request timeout.
func New(m *metrics.Metrics, opts Options) *echo.Echo {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = ErrorHandler(opts.Logger)
	e.IPExtractor = clientAddress(opts.TrustedProxies)

	e.Use(withStandardHeaders(), WithRequestID())
	if opts.Tracing != nil {
		// Outside observe, so that the span covers the whole answer, its
		// error rendered, and the log line and the latency's exemplar
		// carry its trace.
		e.Use(serverSpans(opts.Tracing))
	}
	e.Use(
		observe(opts.Logger, newHTTPMetrics(m)),
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			DisableStackAll: true,
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				opts.Logger.ErrorContext(c.Request().Context(), "panic",
					"request_id", RequestID(c), "err", err, "stack", string(stack))
				return err
			},
		}),
		withParsableQuery(),
		middleware.BodyLimit(BodyLimit),
		middleware.ContextTimeoutWithConfig(middleware.ContextTimeoutConfig{Timeout: opts.RequestTimeout}),
	)
	return e
}

// clientAddress returns how c.RealIP() finds the client. Without trusted
// proxies it is the socket's peer, never a header any client can set.
// With them, X-Forwarded-For is read from the right (each proxy appends the
// peer it saw), skipping trusted hops: the first address not trusted is the
// client. A client's own X-Forwarded-For ends up on the left of what the
// proxy appends, so it is never reached. echo trusts every loopback,
// link-local and private address by default; that is turned off, because
// in a container network every neighbour has a private address.
func clientAddress(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		bits := p.Addr().BitLen()
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// Serve runs h on addr until ctx is cancelled, then stops accepting
// connections and drains in-flight requests for up to drain.
// If ln is nil, Serve listens on addr itself.
func Serve(ctx context.Context, ln net.Listener, addr string, h http.Handler, drain time.Duration) error {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
