package ratelimit

import (
	"errors"
	"net/netip"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
)

// subjectOf names whom the request counts against under per.
func subjectOf(c echo.Context, per Counted) (string, error) {
	if per == PerUser {
		p, ok := auth.PrincipalFrom(c.Request().Context())
		if !ok {
			return "", errors.New("no principal on the request; a per-user limit must run after the auth middleware")
		}
		return "user:" + p.Scope(), nil
	}
	return addressKey(c.RealIP()), nil
}

// addressKey is the key part of a client address: an IPv4 address as it
// is, an IPv6 address by its /64 (one host is given a whole /64, and could
// otherwise take a fresh address for every request). An address that does
// not parse (no peer address at all) is counted as one unknown client.
func addressKey(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "addr:unknown"
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return "addr:" + a.String()
	}
	p, _ := a.Prefix(64) // cannot fail: 64 bits of an IPv6 address
	return "net:" + p.String()
}
