package apptest

import (
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"testing"
)

// NewLimited is New with the limits on, as in production, and the test
// client's loopback address trusted as a proxy, so each test can say which
// client address a request comes from (X-Forwarded-For, see From). The
// counts live in the shared Redis, so tests count against addresses and
// users no other run uses. vars set the limits under test; the others are
// the defaults of SHOP_RATE_LIMIT_*, but for the bound of a limiter call:
// on a loaded test machine a call can pass the 100 ms default and the
// request goes on uncounted (fail open, by design), which would make the
// counts inexact. TestRateLimit_RedisUnreachable keeps the default.
func NewLimited(t *testing.T, replicas int, vars map[string]string) *Env {
	t.Helper()
	environ := map[string]string{
		"SHOP_RATE_LIMIT":         "on",
		"SHOP_TRUSTED_PROXIES":    "127.0.0.1",
		"SHOP_RATE_LIMIT_TIMEOUT": "2s",
	}
	maps.Copy(environ, vars)
	return New(t, replicas, environ)
}

// From is the header pair that makes a request come from addr through the
// trusted proxy (NewLimited).
func From(addr string) []string { return []string{"X-Forwarded-For", addr} }

// RegisterFrom sends POST /v1/users from addr.
func RegisterFrom(t testing.TB, r *Replica, name, addr string) Response {
	t.Helper()
	return r.Do(t, http.MethodPost, "/v1/users", "", map[string]string{"name": name}, From(addr)...)
}

// rateLimitRE is the RateLimit header: the policy, what is left, the
// seconds until the window resets.
var rateLimitRE = regexp.MustCompile(`^"([a-z_]+)";r=(\d+);t=\d+$`)

// RateLimitOf returns the RateLimit header's policy name and remaining
// count; ok is false when the answer has none.
func RateLimitOf(res Response) (policy string, remaining int, ok bool) {
	m := rateLimitRE.FindStringSubmatch(res.Header.Get("RateLimit"))
	if m == nil {
		return "", 0, false
	}
	n, _ := strconv.Atoi(m[2])
	return m[1], n, true
}
