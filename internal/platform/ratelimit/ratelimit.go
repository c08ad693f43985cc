package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The response headers of draft-ietf-httpapi-ratelimit-headers.
const (
	HeaderPolicy = "RateLimit-Policy"
	HeaderLimit  = "RateLimit"
)

// DefaultTimeout bounds one call to the limiter's Redis unless
// Options.Timeout says otherwise. The call is one round trip (well under a
// millisecond on a LAN); a node that has not answered in 100 ms is treated
// as down for that request, which then goes on unlimited.
const DefaultTimeout = 100 * time.Millisecond

// Rate is Count requests per Per, with a burst of Count: the whole count
// may come at once, then one request every Per/Count.
type Rate struct {
	Count int
	Per   time.Duration
}

// periodName is the word a refusal uses for a rate's period; ok is false
// for a period a rate may not have.
func periodName(d time.Duration) (name string, ok bool) {
	switch d {
	case time.Second:
		return "second", true
	case time.Minute:
		return "minute", true
	case time.Hour:
		return "hour", true
	}
	return "", false
}

// Counted is whom a policy counts a request against.
type Counted string

const (
	PerAddress Counted = "client address" // c.RealIP(); an IPv6 client by its /64
	PerUser    Counted = "user"           // the auth principal; after the auth middleware
)

// Policy is one named limit.
type Policy struct {
	// Name labels the metrics and names the policy in the RateLimit
	// headers; it is part of every key, so two policies never share a count.
	Name string
	Rate Rate
	Per  Counted
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Options configure a Limiter.
type Options struct {
	// Off lets every request through uncounted (SHOP_RATE_LIMIT=off), for
	// benchmarks and load tests. The zero value limits.
	Off bool
	// Timeout bounds each call to Redis; 0 means DefaultTimeout.
	Timeout time.Duration
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Limiter counts requests in one Redis for any number of policies.
type Limiter struct {
	gcra    *redis_rate.Limiter
	off     bool
	timeout time.Duration
	metrics *limitMetrics
	logger  *slog.Logger
	// failing is set while Redis does not answer, so an outage is logged
	// when it starts and when it ends, not once per request.
	failing atomic.Bool
}

// New returns a limiter counting in rdb, which may be nil when opts.Off.
// The client must honour context deadlines (redisx.ClientWithin does), or
// a node that does not answer holds each request for its read timeout.
func New(rdb *redis.Client, opts Options) (*Limiter, error) {
	if rdb == nil && !opts.Off {
		return nil, errors.New("rate limiter: no Redis client")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m, err := newLimitMetrics(opts.Metrics.Registry)
	if err != nil {
		return nil, err
	}
	l := &Limiter{off: opts.Off, timeout: opts.Timeout, metrics: m, logger: opts.Logger}
	if rdb != nil {
		l.gcra = redis_rate.NewLimiter(rdb)
	}
	return l, nil
}

// Limit returns the middleware that enforces p on the routes it is listed
// on. With the limiter off it passes every request on.
func (l *Limiter) Limit(p Policy) (echo.MiddlewareFunc, error) {
	if !validName.MatchString(p.Name) {
		return nil, fmt.Errorf("rate limit policy %q: want a name of [a-z0-9_], up to 32", p.Name)
	}
	period, ok := periodName(p.Rate.Per)
	if !ok || p.Rate.Count < 1 {
		return nil, fmt.Errorf("rate limit policy %s: want a count of at least 1 per second, minute or hour, got %d per %v", p.Name, p.Rate.Count, p.Rate.Per)
	}
	if p.Per != PerAddress && p.Per != PerUser {
		return nil, fmt.Errorf("rate limit policy %s: counted per %q, want PerAddress or PerUser", p.Name, p.Per)
	}
	if l.off {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }, nil
	}
	l.metrics.init(p.Name)
	limit := redis_rate.Limit{Rate: p.Rate.Count, Burst: p.Rate.Count, Period: p.Rate.Per}
	policy := fmt.Sprintf("%q;q=%d;w=%d", p.Name, p.Rate.Count, int(p.Rate.Per/time.Second))
	refusal := fmt.Sprintf("%s: at most %d requests per %s per %s", p.Name, p.Rate.Count, period, p.Per)

	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			subject, err := subjectOf(c, p.Per)
			if err != nil {
				return fmt.Errorf("rate limit %s: %w", p.Name, err)
			}
			res, err := l.allow(c.Request().Context(), "shop:"+p.Name+":"+subject, limit)
			if err != nil {
				if c.Request().Context().Err() == nil {
					l.failOpen(c.Request().Context(), p.Name, err)
				}
				return next(c)
			}
			h := c.Response().Header()
			h.Set(HeaderPolicy, policy)
			h.Set(HeaderLimit, fmt.Sprintf("%q;r=%d;t=%d", p.Name, res.Remaining, seconds(res.ResetAfter)))
			if res.Allowed == 0 {
				l.metrics.decided(p.Name, decisionDenied)
				// At least a second: Retry-After is whole seconds.
				wait := max(res.RetryAfter, time.Second)
				return &problem.Error{
					Code:       problem.RateLimited,
					Detail:     refusal + "; retry after " + strconv.Itoa(seconds(wait)) + " s",
					RetryAfter: wait,
				}
			}
			l.metrics.decided(p.Name, decisionAllowed)
			return next(c)
		}
	}, nil
}

// allow counts one request against key, within l.timeout.
func (l *Limiter) allow(ctx context.Context, key string, limit redis_rate.Limit) (*redis_rate.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	res, err := l.gcra.Allow(ctx, key, limit)
	if err != nil {
		return nil, fmt.Errorf("count %s: %w", key, err)
	}
	if l.failing.CompareAndSwap(true, false) {
		l.logger.InfoContext(ctx, "rate limiter answers again: limits are back on")
	}
	return res, nil
}

// failOpen lets a request through that could not be counted. A client
// that hung up is not an outage, so the caller checks that first.
func (l *Limiter) failOpen(ctx context.Context, name string, err error) {
	l.metrics.failOpen(name)
	if l.failing.CompareAndSwap(false, true) {
		l.logger.WarnContext(ctx, "rate limiter unreachable: requests go on unlimited until it answers", "err", err)
	}
}

// seconds rounds d up to whole seconds, as Retry-After and the RateLimit
// header count them.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(math.Ceil(d.Seconds()))
}
