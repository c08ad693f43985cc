// Package config reads the service's settings from the environment into one
// struct, validated at start. The variable names are part of the contract
// (DESIGN.md §5): compose files, scripts and docs use them.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// DefaultGatewayJournal is where `shop gateway` keeps its journal unless
// SHOP_GATEWAY_JOURNAL says otherwise: a data directory under the working
// directory (the repository's, for a developer; ignored by git), created
// when missing, rather than a file among the sources. The compose file
// puts it on a volume.
const DefaultGatewayJournal = "data/gateway-journal.jsonl"

// DefaultMailerJournal is where `shop mailer` keeps its journal unless
// SHOP_MAILER_JOURNAL says otherwise, beside the gateway's.
const DefaultMailerJournal = "data/mailer-journal.jsonl"

// MaxMailerDelay bounds SHOP_MAILER_DELAY: `shop mailer` refuses a longer
// hold-back (mailer.MaxDelay), which its request timeout could not hold.
const MaxMailerDelay = 20 * time.Second

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
	// GatewayNoRefundLimit turns off the check `shop gateway` makes of a
	// refund, that it gives back no more than is left of its charge
	// (SHOP_GATEWAY_REFUND_LIMIT: on, the default, or off): for tests and
	// demos showing the shop's own layers keep refunds within what was
	// captured.
	GatewayNoRefundLimit bool
	// MailerURL is the mail provider the shop sends receipts, tickets and
	// refund mails through (SHOP_MAILER_URL); empty means no mailer.
	MailerURL  string
	MailerAddr string // SHOP_MAILER_ADDR: where `shop mailer` listens
	// MailerJournal is the file where `shop mailer` keeps its messages
	// (SHOP_MAILER_JOURNAL), so a restart forgets none of them.
	MailerJournal string
	// MailerKeyTTL is how long `shop mailer` remembers an Idempotency-Key
	// (SHOP_MAILER_KEY_TTL); past it, the same key sends a second message.
	MailerKeyTTL time.Duration
	// MailerFailRate and MailerDelay are the faults `shop mailer` starts
	// with (SHOP_MAILER_FAIL_RATE, 0–1; SHOP_MAILER_DELAY, 0 to
	// MaxMailerDelay): the share of new keys answered 503, and how long
	// every answer is held back after its message is journaled.
	MailerFailRate float64
	MailerDelay    time.Duration
	// MailerTimeout bounds one attempt of a call to the mailer
	// (SHOP_MAILER_TIMEOUT).
	MailerTimeout time.Duration
	// RequestTimeout bounds every request, from its arrival to its answer
	// (SHOP_REQUEST_TIMEOUT).
	RequestTimeout time.Duration
	// PaymentBudget bounds one pay request from its lock to its recorded
	// outcome (SHOP_PAYMENT_BUDGET). When it runs out after the charge was
	// sent, the answer is 202 processing and the reconciler finishes the
	// work: it must fit inside RequestTimeout with AnswerMargin to spare.
	PaymentBudget time.Duration
	// ReconcileAfter is how long a payment stays processing before the
	// reconciler settles it (SHOP_PAYMENT_RECONCILE_AFTER).
	ReconcileAfter time.Duration
	LockMode       string        // SHOP_LOCK_MODE: degrade | strict
	OrderTTL       time.Duration // SHOP_ORDER_TTL
	SeatHoldTTL    time.Duration // SHOP_SEAT_HOLD_TTL
	// SeatLock is how holds lock their seats (SHOP_SEAT_LOCK): advisory
	// (pg_advisory_xact_lock per seat, the default), redsync (a Redis lock
	// per seat) or none.
	SeatLock string
	// SeatCaps bound what one user may hold of one event.
	SeatCaps SeatCaps
	// LikeLock is how a like locks its (user, post) (SHOP_LIKE_LOCK):
	// advisory (pg_advisory_xact_lock in the like's transaction) or
	// redsync (a Redis lock around it).
	LikeLock string
	// KeyScheme names the idempotency records and the lock names this
	// replica writes (SHOP_KEY_SCHEME: 1 or 2, default 2) and whether a
	// scheme-2 replica still serves beside scheme-1 ones
	// (SHOP_KEY_TRANSITION: on, the default, or off once none runs).
	// DESIGN.md §8 has the rollout.
	KeyScheme keyscheme.Scheme
	Migrate   bool // SHOP_MIGRATE: apply migrations when serve starts
	// Demo makes `shop seed` add a demo user and print its token
	// (SHOP_DEMO). The token is derived from the admin token, so it is
	// the same on every run and needs AdminToken set.
	Demo bool
	// ReplicaName names this replica in the X-Served-By header of every
	// answer (SHOP_REPLICA_NAME); empty means the host's name.
	ReplicaName string
	// LabTarget is the public address the race lab sends its requests to
	// (SHOP_LAB_TARGET): the load balancer under compose, by default this
	// replica's own listener. The lab answers only with Demo on.
	LabTarget string
	// LabGatewayURL is the payment gateway the race lab's live copy
	// charges (SHOP_LAB_GATEWAY_URL), so a lab order's charge never lands
	// in the journal the real orders are audited against. Empty: one in
	// this process, which is right for a single replica; behind a
	// balancer every replica must name the same one (compose's
	// lab-gateway), or a pay storm's charges are counted per replica.
	LabGatewayURL string
	// LabMailerURL is the mail provider the race lab's consumers send
	// receipts through (SHOP_LAB_MAILER_URL), so a lab order's receipt
	// never reaches the real provider. Empty: one in this process; behind
	// a balancer every replica must name the same one (compose's
	// lab-mailer), or a redelivery storm's receipts are counted per
	// replica.
	LabMailerURL string
	DBMaxConns   int32 // SHOP_DB_MAX_CONNS
	// IdempotencyAsyncCommit has the idempotency store commit what it
	// writes apart from a flow's transaction (a stored refusal, a
	// released claim) without waiting for the WAL flush or a synchronous
	// standby (SHOP_IDEMPOTENCY_ASYNC_COMMIT, default false). It saves a
	// flush per refusal; a crash or a failover may then lose one, so that
	// a retry with the key runs the flow again, or is told
	// request_in_progress until the lease ends (package idempotency,
	// "Commits").
	IdempotencyAsyncCommit bool
	JobInterval            time.Duration // SHOP_JOB_INTERVAL: how often background jobs run
	ShutdownDrain          time.Duration // SHOP_SHUTDOWN_DRAIN: how long in-flight requests may finish
	// TrustedProxies are the peers whose X-Forwarded-For is believed
	// (SHOP_TRUSTED_PROXIES): the load balancer. From anyone else the
	// client address is the socket's.
	TrustedProxies []netip.Prefix
	RateLimit      RateLimits
	Events         Events
	// Tracing is what the standard OpenTelemetry variables ask for
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, …): off unless
	// an endpoint is set.
	Tracing tracing.Settings
}

// Events are the settings of the outbox's relay and its consumers
// (package outbox, DESIGN.md §9).
type Events struct {
	// Off stops this process's relay and consumers (SHOP_EVENTS=off): the
	// flows still write their events, which wait in the outbox for a
	// process that relays them.
	Off bool
	// Redis is the node the event streams live on (SHOP_EVENTS_REDIS);
	// empty means the first node of the lock quorum.
	Redis string
	// Prefix starts the name of each event's stream there
	// (SHOP_EVENTS_PREFIX): stacks sharing one Redis each name their own.
	Prefix string
	// RedeliverAfter is how long an event may go unrecorded by a consumer
	// before the relay publishes it again (SHOP_OUTBOX_REDELIVER_AFTER).
	RedeliverAfter time.Duration
	// Retention is how long events and inbox rows are kept
	// (SHOP_OUTBOX_RETENTION); an event is redelivered only within it.
	Retention time.Duration
}

// RateLimits are the abuse limits of package ratelimit.
type RateLimits struct {
	// Off turns every limit off (SHOP_RATE_LIMIT=off), for benchmarks and
	// load tests. The zero value leaves them on.
	Off bool
	// Redis is the node the limits are counted on (SHOP_RATE_LIMIT_REDIS);
	// empty means the first node of the lock quorum.
	Redis string
	// Timeout bounds one call to that node (SHOP_RATE_LIMIT_TIMEOUT); a
	// request whose call takes longer goes on unlimited.
	Timeout  time.Duration
	Register Rate // SHOP_RATE_LIMIT_REGISTER: registrations per client address
	Public   Rate // SHOP_RATE_LIMIT_PUBLIC: unauthenticated reads per client address
	Writes   Rate // SHOP_RATE_LIMIT_WRITES: writes per user, other than creating an order
	Orders   Rate // SHOP_RATE_LIMIT_ORDERS: orders created per user
	Likes    Rate // SHOP_RATE_LIMIT_LIKES: likes and unlikes per user
	Lab      Rate // SHOP_RATE_LIMIT_LAB: race-lab runs started per user
}

// SeatCaps are the caps of package seats on one user's holds of one
// event: within the rate limits, without them, one user could hold
// most of a hall.
type SeatCaps struct {
	PerHold int // SHOP_SEAT_CAP_PER_HOLD: seats in one hold, 1–10
	Holds   int // SHOP_SEAT_CAP_HOLDS: active holds per user per event
	Seats   int // SHOP_SEAT_CAP_SEATS: held seats per user per event, at least PerHold
}

// The bounds of the seat caps: a hold has at most 10 seats
// (seats.MaxHoldSeats), an event at most 26 rows of 50. A cap of a whole
// event is no cap.
const (
	maxSeatsPerHold = 10
	maxEventSeats   = 26 * 50
)

// Rate is Count requests per Per, written "30/h" (per s, m or h).
type Rate struct {
	Count int
	Per   time.Duration
}

func (r Rate) String() string {
	for unit, d := range rateUnits {
		if d == r.Per {
			return strconv.Itoa(r.Count) + "/" + unit
		}
	}
	return strconv.Itoa(r.Count) + "/" + r.Per.String()
}

var rateUnits = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// maxRateCount bounds a rate's count: more than a million per period is
// no limit, and GCRA's arithmetic stays far from float rounding.
const maxRateCount = 1_000_000

// ParseRate reads a rate such as "10/m".
func ParseRate(s string) (Rate, error) {
	count, unit, ok := strings.Cut(s, "/")
	per, known := rateUnits[unit]
	n, err := strconv.Atoi(count)
	if !ok || !known || err != nil || n < 1 || n > maxRateCount {
		return Rate{}, fmt.Errorf("want a rate like 30/h (1–%d per s, m or h), got %q", maxRateCount, s)
	}
	return Rate{Count: n, Per: per}, nil
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
		MailerURL:        str("SHOP_MAILER_URL", ""),
		MailerAddr:       str("SHOP_MAILER_ADDR", ":8082"),
		MailerJournal:    str("SHOP_MAILER_JOURNAL", DefaultMailerJournal),
		MailerKeyTTL:     dur("SHOP_MAILER_KEY_TTL", 24*time.Hour),
		MailerTimeout:    dur("SHOP_MAILER_TIMEOUT", 3*time.Second),
		RequestTimeout:   dur("SHOP_REQUEST_TIMEOUT", 10*time.Second),
		PaymentBudget:    dur("SHOP_PAYMENT_BUDGET", 7*time.Second),
		ReconcileAfter:   dur("SHOP_PAYMENT_RECONCILE_AFTER", 30*time.Second),
		LockMode:         str("SHOP_LOCK_MODE", "degrade"),
		SeatLock:         str("SHOP_SEAT_LOCK", "advisory"),
		LikeLock:         str("SHOP_LIKE_LOCK", "advisory"),
		OrderTTL:         dur("SHOP_ORDER_TTL", 15*time.Minute),
		SeatHoldTTL:      dur("SHOP_SEAT_HOLD_TTL", 5*time.Minute),
		JobInterval:      dur("SHOP_JOB_INTERVAL", 5*time.Second),
		ShutdownDrain:    dur("SHOP_SHUTDOWN_DRAIN", 15*time.Second),
		ReplicaName:      str("SHOP_REPLICA_NAME", ""),
	}
	c.LabTarget = str("SHOP_LAB_TARGET", ownURL(c.HTTPAddr))
	if u, err := url.Parse(c.LabTarget); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		errs = append(errs, fmt.Errorf("SHOP_LAB_TARGET: want an http:// URL, got %q", c.LabTarget))
	}
	if c.LabGatewayURL = str("SHOP_LAB_GATEWAY_URL", ""); c.LabGatewayURL != "" {
		if u, err := url.Parse(c.LabGatewayURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, fmt.Errorf("SHOP_LAB_GATEWAY_URL: want an http:// URL, got %q", c.LabGatewayURL))
		}
	}
	if c.LabMailerURL = str("SHOP_LAB_MAILER_URL", ""); c.LabMailerURL != "" {
		if u, err := url.Parse(c.LabMailerURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, fmt.Errorf("SHOP_LAB_MAILER_URL: want an http:// URL, got %q", c.LabMailerURL))
		}
	}
	count := func(name string, def, lo, hi int) int {
		v := str(name, "")
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("%s: want an integer %d–%d, got %q", name, lo, hi, v))
			return def
		}
		return n
	}
	if ks, err := keyscheme.Parse(str("SHOP_KEY_SCHEME", ""), str("SHOP_KEY_TRANSITION", "")); err != nil {
		errs = append(errs, err)
	} else {
		c.KeyScheme = ks
	}
	c.SeatCaps = SeatCaps{
		PerHold: count("SHOP_SEAT_CAP_PER_HOLD", 10, 1, maxSeatsPerHold),
		Holds:   count("SHOP_SEAT_CAP_HOLDS", 4, 1, maxEventSeats),
		Seats:   count("SHOP_SEAT_CAP_SEATS", 10, 1, maxEventSeats),
	}
	if c.SeatCaps.Seats < c.SeatCaps.PerHold {
		errs = append(errs, fmt.Errorf("SHOP_SEAT_CAP_SEATS: %d is fewer than SHOP_SEAT_CAP_PER_HOLD %d: no hold of that size could be made",
			c.SeatCaps.Seats, c.SeatCaps.PerHold))
	}
	rate := func(name, def string) Rate {
		r, err := ParseRate(str(name, def))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return r
	}
	// The defaults are sized for people shopping, not for scripts
	// (docs/DESIGN.md §5): a burst of the whole count, then one request
	// per period/count.
	c.RateLimit = RateLimits{
		Redis:    str("SHOP_RATE_LIMIT_REDIS", ""),
		Timeout:  dur("SHOP_RATE_LIMIT_TIMEOUT", 100*time.Millisecond),
		Register: rate("SHOP_RATE_LIMIT_REGISTER", "10/m"),
		Public:   rate("SHOP_RATE_LIMIT_PUBLIC", "20/s"),
		Writes:   rate("SHOP_RATE_LIMIT_WRITES", "60/m"),
		Orders:   rate("SHOP_RATE_LIMIT_ORDERS", "30/h"),
		Likes:    rate("SHOP_RATE_LIMIT_LIKES", "120/m"),
		Lab:      rate("SHOP_RATE_LIMIT_LAB", "30/h"),
	}
	switch v := str("SHOP_RATE_LIMIT", "on"); v {
	case "on":
	case "off":
		c.RateLimit.Off = true
	default:
		errs = append(errs, fmt.Errorf("SHOP_RATE_LIMIT: want on or off, got %q", v))
	}
	if a := c.RateLimit.Redis; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("SHOP_RATE_LIMIT_REDIS: want host:port, got %q", a))
		}
	}
	if t, err := tracing.SettingsFromEnv(getenv); err != nil {
		errs = append(errs, err)
	} else {
		c.Tracing = t
	}
	c.Events = Events{
		Redis:          str("SHOP_EVENTS_REDIS", ""),
		Prefix:         str("SHOP_EVENTS_PREFIX", "shop:events:"),
		RedeliverAfter: dur("SHOP_OUTBOX_REDELIVER_AFTER", 30*time.Second),
		Retention:      dur("SHOP_OUTBOX_RETENTION", 24*time.Hour),
	}
	switch v := str("SHOP_GATEWAY_REFUND_LIMIT", "on"); v {
	case "on":
	case "off":
		c.GatewayNoRefundLimit = true
	default:
		errs = append(errs, fmt.Errorf("SHOP_GATEWAY_REFUND_LIMIT: want on or off, got %q", v))
	}
	switch v := str("SHOP_EVENTS", "on"); v {
	case "on":
	case "off":
		c.Events.Off = true
	default:
		errs = append(errs, fmt.Errorf("SHOP_EVENTS: want on or off, got %q", v))
	}
	if a := c.Events.Redis; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("SHOP_EVENTS_REDIS: want host:port, got %q", a))
		}
	}
	if c.Events.Retention <= c.Events.RedeliverAfter {
		errs = append(errs, fmt.Errorf("SHOP_OUTBOX_RETENTION: %s must be longer than SHOP_OUTBOX_REDELIVER_AFTER %s",
			c.Events.Retention, c.Events.RedeliverAfter))
	}
	for _, p := range strings.Split(str("SHOP_TRUSTED_PROXIES", ""), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		prefix, err := parsePrefix(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("SHOP_TRUSTED_PROXIES: want CIDRs or addresses like 10.0.0.0/8, got %q", p))
			continue
		}
		c.TrustedProxies = append(c.TrustedProxies, prefix)
	}
	for _, a := range strings.Split(str("SHOP_REDIS_ADDRS", "localhost:6379"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.RedisAddrs = append(c.RedisAddrs, a)
		}
	}
	flag := func(name string) bool {
		v := str(name, "false")
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: want true or false, got %q", name, v))
		}
		return b
	}
	c.Migrate = flag("SHOP_MIGRATE")
	c.IdempotencyAsyncCommit = flag("SHOP_IDEMPOTENCY_ASYNC_COMMIT")
	c.Demo = flag("SHOP_DEMO")
	if c.Demo && c.AdminToken == "" {
		errs = append(errs, errors.New("SHOP_DEMO: needs SHOP_ADMIN_TOKEN (the demo user's token is derived from it)"))
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
	if c.SeatLock != "advisory" && c.SeatLock != "redsync" && c.SeatLock != "none" {
		errs = append(errs, fmt.Errorf("SHOP_SEAT_LOCK: want advisory, redsync or none, got %q", c.SeatLock))
	}
	if c.LikeLock != "advisory" && c.LikeLock != "redsync" {
		errs = append(errs, fmt.Errorf("SHOP_LIKE_LOCK: want advisory or redsync, got %q", c.LikeLock))
	}
	if len(c.RedisAddrs) == 0 {
		errs = append(errs, errors.New("SHOP_REDIS_ADDRS: need at least one Redis node"))
	}
	// As libpq reads it (a socket directory as the host included), in the
	// form every reader of the setting understands (postgres.CanonicalURL).
	// The error names no part of the URL: it may hold a password.
	if u, err := postgres.CanonicalURL(c.DatabaseURL); err != nil {
		errs = append(errs, errors.New("SHOP_DATABASE_URL: want a postgres:// URL that libpq accepts"))
	} else {
		c.DatabaseURL = u
	}
	if len(c.AdminToken) > 256 {
		errs = append(errs, errors.New("SHOP_ADMIN_TOKEN: at most 256 characters"))
	}
	errs = append(errs, c.checkTimings()...)
	if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("SHOP_METRICS_ADDR: want host:port or :port, got %q", c.MetricsAddr))
	} else if sameListener(c.MetricsAddr, c.HTTPAddr) {
		errs = append(errs, fmt.Errorf("SHOP_METRICS_ADDR: %q is SHOP_HTTP_ADDR's port; the metrics need a port of their own", c.MetricsAddr))
	}
	if u, err := url.Parse(c.GatewayURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		errs = append(errs, fmt.Errorf("SHOP_GATEWAY_URL: want an http:// URL, got %q", c.GatewayURL))
	}
	if c.MailerURL != "" {
		if u, err := url.Parse(c.MailerURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, fmt.Errorf("SHOP_MAILER_URL: want an http:// URL, got %q", c.MailerURL))
		}
	}
	// The mailer's faults are off by default, and 0 is a valid setting of
	// each: read apart from dur, which wants a positive duration.
	if v := str("SHOP_MAILER_FAIL_RATE", ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1) { // NaN fails too
			errs = append(errs, fmt.Errorf("SHOP_MAILER_FAIL_RATE: want a fraction 0–1 like 0.2, got %q", v))
		} else {
			c.MailerFailRate = f
		}
	}
	if v := str("SHOP_MAILER_DELAY", ""); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxMailerDelay {
			errs = append(errs, fmt.Errorf("SHOP_MAILER_DELAY: want a duration 0–%s like 500ms, got %q", MaxMailerDelay, v))
		} else {
			c.MailerDelay = d
		}
	}
	return c, errors.Join(errs...)
}

// The timings of a request fit inside each other; checkTimings holds them
// to it.
const (
	// AnswerMargin is what a request needs after its work is done: the
	// idempotency layer stores the answer (idempotency.FinishTimeout, at
	// most 2 s) before it is sent, and the answer must still be written.
	AnswerMargin = 3 * time.Second
	// MaxRequestTimeout leaves the HTTP server's write timeout
	// (httpx.WriteTimeout, 30 s) room to send any answer.
	MaxRequestTimeout = 25 * time.Second
)

// checkTimings refuses a set of timings in which a pay request could
// outlive its answer: a charge made, and a 503 "request timed out" sent,
// or nothing at all.
func (c Config) checkTimings() []error {
	var errs []error
	if c.RequestTimeout > MaxRequestTimeout {
		errs = append(errs, fmt.Errorf("SHOP_REQUEST_TIMEOUT: at most %s (the server's write timeout must outlast it), got %s",
			MaxRequestTimeout, c.RequestTimeout))
	}
	if c.PaymentBudget+AnswerMargin > c.RequestTimeout {
		errs = append(errs, fmt.Errorf("SHOP_PAYMENT_BUDGET: %s does not fit SHOP_REQUEST_TIMEOUT %s: the budget plus %s to store and send the answer must not exceed it",
			c.PaymentBudget, c.RequestTimeout, AnswerMargin))
	}
	if c.ReconcileAfter <= c.PaymentBudget {
		errs = append(errs, fmt.Errorf("SHOP_PAYMENT_RECONCILE_AFTER: %s must be longer than SHOP_PAYMENT_BUDGET %s, or the reconciler takes up payments whose requests still run",
			c.ReconcileAfter, c.PaymentBudget))
	}
	return errs
}

// ownURL is the URL of a listen address as seen from this host: ":8080"
// is http://127.0.0.1:8080.
func ownURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
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
		slog.String("mailer_url", c.MailerURL),
		slog.Duration("mailer_timeout", c.MailerTimeout),
		slog.Duration("request_timeout", c.RequestTimeout),
		slog.Duration("payment_budget", c.PaymentBudget),
		slog.Duration("payment_reconcile_after", c.ReconcileAfter),
		slog.String("lock_mode", c.LockMode),
		slog.Duration("order_ttl", c.OrderTTL),
		slog.Duration("seat_hold_ttl", c.SeatHoldTTL),
		slog.String("seat_lock", c.SeatLock),
		slog.String("like_lock", c.LikeLock),
		slog.Group("seat_caps",
			slog.Int("per_hold", c.SeatCaps.PerHold),
			slog.Int("holds", c.SeatCaps.Holds),
			slog.Int("seats", c.SeatCaps.Seats),
		),
		slog.String("key_scheme", c.KeyScheme.String()),
		slog.Group("events",
			slog.Bool("off", c.Events.Off),
			slog.String("redis", c.Events.Redis),
			slog.String("prefix", c.Events.Prefix),
			slog.Duration("redeliver_after", c.Events.RedeliverAfter),
			slog.Duration("retention", c.Events.Retention),
		),
		slog.Bool("tracing", c.Tracing.Export),
		slog.Bool("migrate", c.Migrate),
		// Said at start: it gives up what a replay after a failover gets.
		slog.Bool("idempotency_async_commit", c.IdempotencyAsyncCommit),
		slog.Bool("demo", c.Demo),
		slog.String("replica_name", c.ReplicaName),
		slog.String("lab_target", c.LabTarget),
		slog.String("lab_gateway_url", c.LabGatewayURL),
		slog.String("lab_mailer_url", c.LabMailerURL),
		slog.Any("trusted_proxies", c.TrustedProxies),
		slog.Group("rate_limit",
			slog.Bool("off", c.RateLimit.Off),
			slog.String("redis", c.RateLimit.Redis),
			slog.Duration("timeout", c.RateLimit.Timeout),
			slog.String("register", c.RateLimit.Register.String()),
			slog.String("public", c.RateLimit.Public.String()),
			slog.String("writes", c.RateLimit.Writes.String()),
			slog.String("orders", c.RateLimit.Orders.String()),
			slog.String("likes", c.RateLimit.Likes.String()),
			slog.String("lab", c.RateLimit.Lab.String()),
		),
	)
}

// parsePrefix reads a CIDR, or a single address as a prefix of its full
// length. A CIDR with host bits set (10.1.2.3/8) means its network.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("an address with a zone is no prefix")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
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
