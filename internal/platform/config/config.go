// Package config reads the service's settings from the environment into one
// struct, validated at start. The variable names are part of the contract
// (DESIGN.md §5): compose files, scripts and docs use them.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultGatewayJournal is where `shop gateway` keeps its journal unless
// SHOP_GATEWAY_JOURNAL says otherwise: a data directory under the working
// directory (the repository's, for a developer; ignored by git), created
// when missing, rather than a file among the sources. The compose file
// puts it on a volume.
const DefaultGatewayJournal = "data/gateway-journal.jsonl"

// Config is everything the binary reads from its environment.
type Config struct {
	HTTPAddr string // SHOP_HTTP_ADDR
	// MetricsAddr is where `shop serve` answers GET /metrics
	// (SHOP_METRICS_ADDR): a port of its own, for the scraper, so the
	// metrics are not public on the API's port.
	MetricsAddr string
	DatabaseURL string   // SHOP_DATABASE_URL
	RedisAddrs  []string // SHOP_REDIS_ADDRS, comma-separated
	AdminToken  string   // SHOP_ADMIN_TOKEN; empty: admin routes answer 403
	GatewayURL  string   // SHOP_GATEWAY_URL
	GatewayAddr string   // SHOP_GATEWAY_ADDR: where `shop gateway` listens
	// GatewayJournal is the file where `shop gateway` keeps its charges
	// (SHOP_GATEWAY_JOURNAL), so a restart forgets none of them.
	GatewayJournal string
	// GatewaySlowDelay is how long `shop gateway` holds back its answer to
	// pm_card_slow (SHOP_GATEWAY_SLOW_DELAY); longer than GatewayTimeout.
	GatewaySlowDelay time.Duration
	// GatewayTimeout bounds one attempt of a call to the gateway
	// (SHOP_GATEWAY_TIMEOUT).
	GatewayTimeout time.Duration
	// ReconcileAfter is how long a payment stays processing before the
	// reconciler settles it (SHOP_PAYMENT_RECONCILE_AFTER).
	ReconcileAfter time.Duration
	LockMode       string        // SHOP_LOCK_MODE: degrade | strict
	OrderTTL       time.Duration // SHOP_ORDER_TTL
	SeatHoldTTL    time.Duration // SHOP_SEAT_HOLD_TTL
	Migrate        bool          // SHOP_MIGRATE: apply migrations when serve starts
	DBMaxConns     int32         // SHOP_DB_MAX_CONNS
	JobInterval    time.Duration // SHOP_JOB_INTERVAL: how often background jobs run
	ShutdownDrain  time.Duration // SHOP_SHUTDOWN_DRAIN: how long in-flight requests may finish
}

// FromEnv reads the configuration with getenv (os.Getenv in production).
func FromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	str := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	var errs []error
	dur := func(name string, def time.Duration) time.Duration {
		v := str(name, "")
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive duration like 15m, got %q", name, v))
			return def
		}
		return d
	}

	c := Config{
		HTTPAddr:         str("SHOP_HTTP_ADDR", ":8080"),
		MetricsAddr:      str("SHOP_METRICS_ADDR", ":9090"),
		DatabaseURL:      str("SHOP_DATABASE_URL", "postgres://shop:shop@localhost:5432/shop?sslmode=disable"),
		AdminToken:       str("SHOP_ADMIN_TOKEN", ""),
		GatewayURL:       str("SHOP_GATEWAY_URL", "http://localhost:8081"),
		GatewayAddr:      str("SHOP_GATEWAY_ADDR", ":8081"),
		GatewayJournal:   str("SHOP_GATEWAY_JOURNAL", DefaultGatewayJournal),
		GatewaySlowDelay: dur("SHOP_GATEWAY_SLOW_DELAY", 10*time.Second),
		GatewayTimeout:   dur("SHOP_GATEWAY_TIMEOUT", 3*time.Second),
		ReconcileAfter:   dur("SHOP_PAYMENT_RECONCILE_AFTER", 30*time.Second),
		LockMode:         str("SHOP_LOCK_MODE", "degrade"),
		OrderTTL:         dur("SHOP_ORDER_TTL", 15*time.Minute),
		SeatHoldTTL:      dur("SHOP_SEAT_HOLD_TTL", 5*time.Minute),
		JobInterval:      dur("SHOP_JOB_INTERVAL", 5*time.Second),
		ShutdownDrain:    dur("SHOP_SHUTDOWN_DRAIN", 15*time.Second),
	}
	for _, a := range strings.Split(str("SHOP_REDIS_ADDRS", "localhost:6379"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.RedisAddrs = append(c.RedisAddrs, a)
		}
	}
	if v := str("SHOP_MIGRATE", "false"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SHOP_MIGRATE: want true or false, got %q", v))
		}
		c.Migrate = b
	}
	// A few connections per database core: more only queue inside
	// PostgreSQL, on row locks and CPU, and stretch the tail
	// (docs/BENCHMARKS.md). The idempotency bookkeeping pool gets half as
	// many again.
	if v := str("SHOP_DB_MAX_CONNS", "8"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("SHOP_DB_MAX_CONNS: want a positive integer, got %q", v))
		}
		c.DBMaxConns = int32(n)
	}
	if c.LockMode != "degrade" && c.LockMode != "strict" {
		errs = append(errs, fmt.Errorf("SHOP_LOCK_MODE: want degrade or strict, got %q", c.LockMode))
	}
	if len(c.RedisAddrs) == 0 {
		errs = append(errs, errors.New("SHOP_REDIS_ADDRS: need at least one Redis node"))
	}
	if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		errs = append(errs, errors.New("SHOP_DATABASE_URL: want a postgres:// URL"))
	}
	if len(c.AdminToken) > 256 {
		errs = append(errs, errors.New("SHOP_ADMIN_TOKEN: at most 256 characters"))
	}
	if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("SHOP_METRICS_ADDR: want host:port or :port, got %q", c.MetricsAddr))
	} else if sameListener(c.MetricsAddr, c.HTTPAddr) {
		errs = append(errs, fmt.Errorf("SHOP_METRICS_ADDR: %q is SHOP_HTTP_ADDR's port; the metrics need a port of their own", c.MetricsAddr))
	}
	if u, err := url.Parse(c.GatewayURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		errs = append(errs, fmt.Errorf("SHOP_GATEWAY_URL: want an http:// URL, got %q", c.GatewayURL))
	}
	return c, errors.Join(errs...)
}

// sameListener reports whether two listen addresses would take the same
// port: the same port on the same host, or on a wildcard host.
func sameListener(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wildcard(ha) || wildcard(hb)
}

// LogValue masks the secrets when the config is logged.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("http_addr", c.HTTPAddr),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.String("database_url", maskURL(c.DatabaseURL)),
		slog.Any("redis_addrs", c.RedisAddrs),
		slog.Bool("admin_token_set", c.AdminToken != ""),
		slog.String("gateway_url", c.GatewayURL),
		slog.Duration("gateway_timeout", c.GatewayTimeout),
		slog.Duration("payment_reconcile_after", c.ReconcileAfter),
		slog.String("lock_mode", c.LockMode),
		slog.Duration("order_ttl", c.OrderTTL),
		slog.Duration("seat_hold_ttl", c.SeatHoldTTL),
		slog.Bool("migrate", c.Migrate),
	)
}

func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	// pgx also takes the password from the query string.
	q := u.Query()
	for _, secret := range []string{"password", "sslpassword"} {
		if q.Has(secret) {
			q.Set(secret, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
