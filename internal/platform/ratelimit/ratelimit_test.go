package ratelimit_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/ratelimit"
	"github.com/shop-example/shop/internal/platform/redisx"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// perHour is a rate that cannot refill while a test runs, so counts are
// exact without touching the clock (the clock is the Redis server's).
func perHour(n int) ratelimit.Rate { return ratelimit.Rate{Count: n, Per: time.Hour} }

// server is one limited route behind the service's HTTP edge (its error
// handler renders the 429), with a count of the requests that reached
// the handler.
type server struct {
	echo    *echo.Echo
	metrics *metrics.Metrics
	reached atomic.Int64
}

// countingTimeout bounds a limiter call in the tests that count: on a
// loaded machine a call may pass the 100 ms default, and the request then
// goes on uncounted (fail open, by design). The fail-open tests keep the
// default.
const countingTimeout = 2 * time.Second

// newServer serves GET /thing under policy p, counted in the Redis at addr
// through a client bounded like the service's (redisx.ClientWithin, the
// limiter's timeout). A middleware before the limit authenticates every
// request that has an X-User header as that user.
func newServer(t *testing.T, addr string, opts ratelimit.Options, p ratelimit.Policy) *server {
	t.Helper()
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = ratelimit.DefaultTimeout
	}
	client := redisx.ClientWithin(addr, timeout)
	t.Cleanup(func() { _ = client.Close() })
	s := &server{metrics: metrics.New()}
	opts.Metrics = s.metrics
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := ratelimit.New(client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	limit, err := l.Limit(p)
	if err != nil {
		t.Fatalf("Limit: %v", err)
	}
	s.echo = httpx.New(s.metrics, httpx.Options{Logger: slog.New(slog.DiscardHandler)})
	asUser := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if id := c.Request().Header.Get("X-User"); id != "" {
				ctx := auth.WithPrincipal(c.Request().Context(), auth.Principal{UserID: id})
				c.SetRequest(c.Request().WithContext(ctx))
			}
			return next(c)
		}
	}
	s.echo.GET("/thing", func(c echo.Context) error {
		s.reached.Add(1)
		return c.String(http.StatusOK, "ok")
	}, asUser, limit)
	return s
}

// get sends GET /thing from the client address from, as user if set.
func (s *server) get(from, user string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/thing", nil)
	req.RemoteAddr = net.JoinHostPort(from, "40000")
	if user != "" {
		req.Header.Set("X-User", user)
	}
	rec := httptest.NewRecorder()
	s.echo.ServeHTTP(rec, req)
	return rec
}

// counter reads a counter of the server's registry; labels are name/value
// pairs.
func (s *server) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := s.metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s%v", name, labels)
	return 0
}

// testNet64 returns the first 64 bits of an IPv6 address, as "2001:db8:x:y",
// random per run like testenv.ClientAddr.
func testNet64() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("2001:db8:%x:%x", uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3]))
}

// rateLimitHeader is the RateLimit header of the policy "register".
var rateLimitHeader = regexp.MustCompile(`^"register";r=(\d+);t=(\d+)$`)

// A rate of 3 per hour: three answers from the handler, each saying how
// many are left, then 429 rate_limited without the handler running, with
// the headers the draft and API.md promise.
func TestLimit_Answers(t *testing.T) {
	s := newServer(t, testenv.RedisAddrs(t)[0], ratelimit.Options{Timeout: countingTimeout},
		ratelimit.Policy{Name: "register", Rate: perHour(3), Per: ratelimit.PerAddress})
	from := testenv.ClientAddr()

	for i := range 3 {
		rec := s.get(from, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d %s, want 200", i+1, rec.Code, rec.Body)
		}
		if got, want := rec.Header().Get(ratelimit.HeaderPolicy), `"register";q=3;w=3600`; got != want {
			t.Errorf("request %d: %s %q, want %q", i+1, ratelimit.HeaderPolicy, got, want)
		}
		m := rateLimitHeader.FindStringSubmatch(rec.Header().Get(ratelimit.HeaderLimit))
		if m == nil {
			t.Fatalf("request %d: %s %q, want \"register\";r=<left>;t=<seconds>", i+1, ratelimit.HeaderLimit, rec.Header().Get(ratelimit.HeaderLimit))
		}
		if left, _ := strconv.Atoi(m[1]); left != 2-i {
			t.Errorf("request %d: r=%d, want %d left", i+1, left, 2-i)
		}
		// GCRA: each request pushes the full burst 20 minutes further out.
		if secs, _ := strconv.Atoi(m[2]); secs < (i+1)*1200-60 || secs > (i+1)*1200 {
			t.Errorf("request %d: t=%d, want about %d s until the burst is back", i+1, secs, (i+1)*1200)
		}
	}

	rec := s.get(from, "")
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("request 4: %d %s, want 429", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != httpx.ProblemContentType {
		t.Errorf("Content-Type %q, want %s", ct, httpx.ProblemContentType)
	}
	var doc struct {
		Code   string `json:"code"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Code != "rate_limited" || doc.Status != 429 {
		t.Errorf("body %s (%v), want a problem document with code rate_limited and status 429", rec.Body, err)
	}
	// The next request is allowed a third of an hour after the last one.
	retry, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || retry < 1100 || retry > 1200 {
		t.Errorf("Retry-After %q, want whole seconds, about 1200", rec.Header().Get("Retry-After"))
	}
	if got := rec.Header().Get(ratelimit.HeaderLimit); !regexp.MustCompile(`^"register";r=0;t=\d+$`).MatchString(got) {
		t.Errorf("refusal's %s %q, want r=0", ratelimit.HeaderLimit, got)
	}
	if rec.Header().Get(ratelimit.HeaderPolicy) == "" {
		t.Errorf("refusal has no %s", ratelimit.HeaderPolicy)
	}
	if n := s.reached.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3 (never for the refusal)", n)
	}
	if got := s.counter(t, "shop_rate_limit_requests_total", "limit", "register", "decision", "allowed"); got != 3 {
		t.Errorf("allowed = %v, want 3", got)
	}
	if got := s.counter(t, "shop_rate_limit_requests_total", "limit", "register", "decision", "denied"); got != 1 {
		t.Errorf("denied = %v, want 1", got)
	}

	// A refusal consumes nothing: refusing again does not push the
	// client's next chance further out.
	again := s.get(from, "")
	if got, _ := strconv.Atoi(again.Header().Get("Retry-After")); again.Code != http.StatusTooManyRequests || got > retry {
		t.Errorf("refused again: %d, Retry-After %d; want 429 and no more than %d", again.Code, got, retry)
	}
}

// Each client address, each IPv6 /64 and each user has a count of its own.
func TestLimit_Subjects(t *testing.T) {
	addr := testenv.RedisAddrs(t)[0]

	t.Run("Addresses", func(t *testing.T) {
		s := newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, ratelimit.Policy{Name: "register", Rate: perHour(1), Per: ratelimit.PerAddress})
		a, b := testenv.ClientAddr(), testenv.ClientAddr()
		for _, tt := range []struct {
			from string
			want int
		}{{a, 200}, {a, 429}, {b, 200}, {b, 429}} {
			if rec := s.get(tt.from, ""); rec.Code != tt.want {
				t.Errorf("from %s: %d, want %d", tt.from, rec.Code, tt.want)
			}
		}
	})
	t.Run("IPv6By64", func(t *testing.T) {
		s := newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, ratelimit.Policy{Name: "register", Rate: perHour(2), Per: ratelimit.PerAddress})
		net1, net2 := testNet64(), testNet64()
		for _, tt := range []struct {
			from string
			want int
		}{
			{net1 + "::1", 200},
			{net1 + ":ffff:ffff:ffff:fffe", 200}, // same /64, another host
			{net1 + "::abcd", 429},
			{net2 + "::1", 200},
		} {
			if rec := s.get(tt.from, ""); rec.Code != tt.want {
				t.Errorf("from %s: %d, want %d", tt.from, rec.Code, tt.want)
			}
		}
	})
	t.Run("Users", func(t *testing.T) {
		s := newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, ratelimit.Policy{Name: "orders", Rate: perHour(1), Per: ratelimit.PerUser})
		from := testenv.ClientAddr() // one address: users behind one NAT are not lumped
		alice, bob := uuid.NewString(), uuid.NewString()
		for _, tt := range []struct {
			user string
			want int
		}{{alice, 200}, {alice, 429}, {bob, 200}, {bob, 429}} {
			if rec := s.get(from, tt.user); rec.Code != tt.want {
				t.Errorf("user %s: %d, want %d", tt.user, rec.Code, tt.want)
			}
		}
	})
	t.Run("UserWithoutAuth", func(t *testing.T) {
		s := newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, ratelimit.Policy{Name: "orders", Rate: perHour(5), Per: ratelimit.PerUser})
		if rec := s.get(testenv.ClientAddr(), ""); rec.Code != http.StatusInternalServerError || s.reached.Load() != 0 {
			t.Errorf("per-user limit with no principal: %d, handler ran %d times; want 500 and never", rec.Code, s.reached.Load())
		}
	})
	t.Run("PoliciesApart", func(t *testing.T) {
		// Two policies on one client count separately: the name is in the key.
		from := testenv.ClientAddr()
		first := newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, ratelimit.Policy{Name: "first", Rate: perHour(1), Per: ratelimit.PerAddress})
		second := newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, ratelimit.Policy{Name: "second", Rate: perHour(1), Per: ratelimit.PerAddress})
		if a, b := first.get(from, ""), second.get(from, ""); a.Code != http.StatusOK || b.Code != http.StatusOK {
			t.Errorf("first policy %d, second %d; want 200 each", a.Code, b.Code)
		}
	})
}

// Two limiters on one Redis, as two replicas run them, share the count:
// 4 per hour is 4 across both, however the requests are spread.
func TestLimit_SharedByReplicas(t *testing.T) {
	addr := testenv.RedisAddrs(t)[0]
	p := ratelimit.Policy{Name: "register", Rate: perHour(4), Per: ratelimit.PerAddress}
	replicas := []*server{newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, p), newServer(t, addr, ratelimit.Options{Timeout: countingTimeout}, p)}
	from := testenv.ClientAddr()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range 20 {
		wg.Go(func() {
			if replicas[i%2].get(from, "").Code == http.StatusOK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n := ok.Load(); n != 4 {
		t.Errorf("%d of 20 requests allowed across two replicas, want 4", n)
	}
	if n := replicas[0].reached.Load() + replicas[1].reached.Load(); n != 4 {
		t.Errorf("handlers ran %d times, want 4", n)
	}
}

// When the limiter's Redis is down or hangs, requests go on unlimited,
// each counted as fail-open, and each waits at most the call's bound.
func TestLimit_FailOpen(t *testing.T) {
	for name, addr := range map[string]func(*testing.T) string{
		"Refused": func(*testing.T) string { return "127.0.0.1:1" },
		"Hangs":   func(t *testing.T) string { return testenv.Blackhole(t) },
	} {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, addr(t), ratelimit.Options{}, ratelimit.Policy{Name: "register", Rate: perHour(1), Per: ratelimit.PerAddress})
			from := testenv.ClientAddr()
			for i := range 3 {
				start := time.Now()
				rec := s.get(from, "")
				if rec.Code != http.StatusOK {
					t.Fatalf("request %d: %d %s, want 200 (fail open)", i+1, rec.Code, rec.Body)
				}
				// Generous: the bound is 100 ms; go-redis's default read
				// timeout, the thing it prevents, is 5 s.
				if elapsed := time.Since(start); elapsed > 2*time.Second {
					t.Errorf("request %d took %v with the limiter's Redis %s", i+1, elapsed, name)
				}
				if h := rec.Header().Get(ratelimit.HeaderLimit); h != "" {
					t.Errorf("request %d: %s %q, want none: nothing was counted", i+1, ratelimit.HeaderLimit, h)
				}
			}
			if got := s.counter(t, "shop_rate_limit_fail_open_total", "limit", "register"); got != 3 {
				t.Errorf("fail_open = %v, want 3", got)
			}
			if got := s.counter(t, "shop_rate_limit_requests_total", "limit", "register", "decision", "allowed"); got != 0 {
				t.Errorf("allowed = %v, want 0: a request let through uncounted is not a decision", got)
			}
		})
	}
}

// A client that hung up while its request was being counted is not a
// Redis outage.
func TestLimit_ClientGone(t *testing.T) {
	s := newServer(t, testenv.Blackhole(t), ratelimit.Options{}, ratelimit.Policy{Name: "register", Rate: perHour(1), Per: ratelimit.PerAddress})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, "/thing", nil).WithContext(ctx)
	req.RemoteAddr = testenv.ClientAddr() + ":40000"
	s.echo.ServeHTTP(httptest.NewRecorder(), req)
	if got := s.counter(t, "shop_rate_limit_fail_open_total", "limit", "register"); got != 0 {
		t.Errorf("fail_open = %v after a client hung up, want 0", got)
	}
}

// Off lets everything through, uncounted and without headers; it needs no
// Redis at all.
func TestLimit_Off(t *testing.T) {
	m := metrics.New()
	l, err := ratelimit.New(nil, ratelimit.Options{Off: true, Metrics: m})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	limit, err := l.Limit(ratelimit.Policy{Name: "register", Rate: perHour(1), Per: ratelimit.PerAddress})
	if err != nil {
		t.Fatalf("Limit: %v", err)
	}
	e := httpx.New(m, httpx.Options{Logger: slog.New(slog.DiscardHandler)})
	e.GET("/thing", func(c echo.Context) error { return c.String(http.StatusOK, "ok") }, limit)
	for i := range 5 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/thing", nil))
		if rec.Code != http.StatusOK || rec.Header().Get(ratelimit.HeaderPolicy) != "" {
			t.Errorf("request %d with limits off: %d, %s %q; want 200 and no header", i+1, rec.Code, ratelimit.HeaderPolicy, rec.Header().Get(ratelimit.HeaderPolicy))
		}
	}
}

func TestNew_NeedsRedisUnlessOff(t *testing.T) {
	if _, err := ratelimit.New(nil, ratelimit.Options{}); err == nil {
		t.Error("New(nil) with limits on = nil error, want one: a limiter that cannot count must not start")
	}
}

func TestLimit_InvalidPolicy(t *testing.T) {
	l, err := ratelimit.New(nil, ratelimit.Options{Off: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]ratelimit.Policy{
		"NoName":      {Rate: perHour(1), Per: ratelimit.PerUser},
		"NameQuoted":  {Name: `a"b`, Rate: perHour(1), Per: ratelimit.PerUser},
		"NameUpper":   {Name: "Orders", Rate: perHour(1), Per: ratelimit.PerUser},
		"ZeroCount":   {Name: "orders", Rate: ratelimit.Rate{Per: time.Hour}, Per: ratelimit.PerUser},
		"ZeroPeriod":  {Name: "orders", Rate: ratelimit.Rate{Count: 1}, Per: ratelimit.PerUser},
		"OddPeriod":   {Name: "orders", Rate: ratelimit.Rate{Count: 1, Per: 90 * time.Second}, Per: ratelimit.PerUser},
		"NoSubject":   {Name: "orders", Rate: perHour(1)},
		"BadSubject":  {Name: "orders", Rate: perHour(1), Per: "session"},
		"NegativeOne": {Name: "orders", Rate: ratelimit.Rate{Count: -1, Per: time.Hour}, Per: ratelimit.PerUser},
	} {
		if _, err := l.Limit(p); err == nil {
			t.Errorf("%s: Limit(%+v) = nil error, want one", name, p)
		}
	}
}
