package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// env returns a getenv over vars that records every name it is asked for.
func env(vars map[string]string, asked map[string]bool) func(string) string {
	return func(name string) string {
		if asked != nil {
			asked[name] = true
		}
		return vars[name]
	}
}

// allVars names every variable FromEnv reads.
var allVars = []string{
	"SHOP_HTTP_ADDR",
	"SHOP_METRICS_ADDR",
	"SHOP_DATABASE_URL",
	"SHOP_REDIS_ADDRS",
	"SHOP_ADMIN_TOKEN",
	"SHOP_GATEWAY_URL",
	"SHOP_GATEWAY_ADDR",
	"SHOP_GATEWAY_JOURNAL",
	"SHOP_GATEWAY_SLOW_DELAY",
	"SHOP_GATEWAY_TIMEOUT",
	"SHOP_GATEWAY_REFUND_LIMIT",
	"SHOP_MAILER_URL",
	"SHOP_MAILER_ADDR",
	"SHOP_MAILER_JOURNAL",
	"SHOP_MAILER_KEY_TTL",
	"SHOP_MAILER_FAIL_RATE",
	"SHOP_MAILER_DELAY",
	"SHOP_MAILER_TIMEOUT",
	"SHOP_PAYMENT_RECONCILE_AFTER",
	"SHOP_LOCK_MODE",
	"SHOP_ORDER_TTL",
	"SHOP_SEAT_HOLD_TTL",
	"SHOP_SEAT_LOCK",
	"SHOP_SEAT_CAP_PER_HOLD",
	"SHOP_SEAT_CAP_HOLDS",
	"SHOP_SEAT_CAP_SEATS",
	"SHOP_LIKE_LOCK",
	"SHOP_KEY_SCHEME",
	"SHOP_KEY_TRANSITION",
	"SHOP_MIGRATE",
	"SHOP_DEMO",
	"SHOP_REPLICA_NAME",
	"SHOP_LAB_TARGET",
	"SHOP_LAB_GATEWAY_URL",
	"SHOP_LAB_MAILER_URL",
	"SHOP_DB_MAX_CONNS",
	"SHOP_IDEMPOTENCY_ASYNC_COMMIT",
	"SHOP_JOB_INTERVAL",
	"SHOP_SHUTDOWN_DRAIN",
	"SHOP_REQUEST_TIMEOUT",
	"SHOP_PAYMENT_BUDGET",
	"SHOP_TRUSTED_PROXIES",
	"SHOP_EVENTS",
	"SHOP_EVENTS_REDIS",
	"SHOP_EVENTS_PREFIX",
	"SHOP_OUTBOX_REDELIVER_AFTER",
	"SHOP_OUTBOX_RETENTION",
	"SHOP_RATE_LIMIT",
	"SHOP_RATE_LIMIT_REDIS",
	"SHOP_RATE_LIMIT_TIMEOUT",
	"SHOP_RATE_LIMIT_REGISTER",
	"SHOP_RATE_LIMIT_PUBLIC",
	"SHOP_RATE_LIMIT_WRITES",
	"SHOP_RATE_LIMIT_ORDERS",
	"SHOP_RATE_LIMIT_LIKES",
	"SHOP_RATE_LIMIT_LAB",
	"OTEL_SDK_DISABLED",
	"OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_TRACES_SAMPLER",
	"OTEL_TRACES_SAMPLER_ARG",
}

// The defaults are DESIGN.md §5's table; the variables after it are not
// in the table and keep the values main was written against.
func TestFromEnv_Defaults(t *testing.T) {
	asked := map[string]bool{}
	got, err := FromEnv(env(nil, asked))
	if err != nil {
		t.Fatalf("FromEnv(empty) = %v", err)
	}
	want := Config{
		HTTPAddr:    ":8080",
		MetricsAddr: ":9090",
		DatabaseURL: "postgres://shop:shop@localhost:5432/shop?sslmode=disable",
		RedisAddrs:  []string{"localhost:6379"},
		AdminToken:  "",
		GatewayURL:  "http://localhost:8081",
		GatewayAddr: ":8081",
		LockMode:    "degrade",
		OrderTTL:    15 * time.Minute,
		SeatHoldTTL: 5 * time.Minute,
		SeatLock:    "advisory",
		// Ten seats a hold, four holds and ten seats per user per event.
		SeatCaps:  SeatCaps{PerHold: 10, Holds: 4, Seats: 10},
		LikeLock:  "advisory",
		KeyScheme: keyscheme.Scheme{Version: 2, Transition: true},

		GatewayJournal:   "data/gateway-journal.jsonl",
		GatewaySlowDelay: 10 * time.Second,
		GatewayTimeout:   3 * time.Second,
		MailerURL:        "", // no mailer to send through
		MailerAddr:       ":8082",
		MailerJournal:    "data/mailer-journal.jsonl",
		MailerKeyTTL:     24 * time.Hour,
		MailerFailRate:   0,
		MailerDelay:      0,
		MailerTimeout:    3 * time.Second,
		RequestTimeout:   10 * time.Second,
		PaymentBudget:    7 * time.Second,
		ReconcileAfter:   30 * time.Second,
		Migrate:          false,
		DBMaxConns:       8,
		JobInterval:      5 * time.Second,
		ShutdownDrain:    15 * time.Second,
		// The race lab fires at this replica's own listener.
		LabTarget: "http://127.0.0.1:8080",
		// Events relayed and consumed here, on the first lock node.
		Events: Events{Prefix: "shop:events:", RedeliverAfter: 30 * time.Second, Retention: 24 * time.Hour},
		// Limits on, counted on the first lock node; no proxy trusted.
		RateLimit: RateLimits{
			Timeout:  100 * time.Millisecond,
			Register: Rate{10, time.Minute},
			Public:   Rate{20, time.Second},
			Writes:   Rate{60, time.Minute},
			Orders:   Rate{30, time.Hour},
			Likes:    Rate{120, time.Minute},
			Lab:      Rate{30, time.Hour},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromEnv(empty) =\n%+v\nwant\n%+v", got, want)
	}
	for _, name := range allVars {
		if !asked[name] {
			t.Errorf("%s is never read", name)
		}
	}
	for name := range asked {
		if !slices.Contains(allVars, name) {
			t.Errorf("%s is read but not in the list of variables: add it to DESIGN.md §5 and to allVars", name)
		}
	}
}

// Setting every variable to a value other than its default shows each one
// reaches its field.
func TestFromEnv_EveryVariable(t *testing.T) {
	vars := map[string]string{
		"SHOP_HTTP_ADDR":                     "127.0.0.1:9000",
		"SHOP_METRICS_ADDR":                  "127.0.0.1:9100",
		"SHOP_DATABASE_URL":                  "postgresql://app:pw@db:5433/shop_prod?sslmode=require",
		"SHOP_REDIS_ADDRS":                   " r1:6379, r2:6379 ,,r3:6379,",
		"SHOP_ADMIN_TOKEN":                   "admin-secret",
		"SHOP_GATEWAY_URL":                   "http://gateway:9090",
		"SHOP_GATEWAY_ADDR":                  ":9090",
		"SHOP_GATEWAY_JOURNAL":               "/data/gw.jsonl",
		"SHOP_GATEWAY_SLOW_DELAY":            "20s",
		"SHOP_GATEWAY_TIMEOUT":               "1500ms",
		"SHOP_GATEWAY_REFUND_LIMIT":          "off",
		"SHOP_MAILER_URL":                    "http://mailer:8082",
		"SHOP_MAILER_ADDR":                   ":9082",
		"SHOP_MAILER_JOURNAL":                "/data/mail.jsonl",
		"SHOP_MAILER_KEY_TTL":                "1h",
		"SHOP_MAILER_FAIL_RATE":              "0.25",
		"SHOP_MAILER_DELAY":                  "750ms",
		"SHOP_MAILER_TIMEOUT":                "2s",
		"SHOP_PAYMENT_RECONCILE_AFTER":       "2m",
		"SHOP_LOCK_MODE":                     "strict",
		"SHOP_ORDER_TTL":                     "30m",
		"SHOP_SEAT_HOLD_TTL":                 "90s",
		"SHOP_SEAT_LOCK":                     "redsync",
		"SHOP_SEAT_CAP_PER_HOLD":             "6",
		"SHOP_SEAT_CAP_HOLDS":                "2",
		"SHOP_SEAT_CAP_SEATS":                "8",
		"SHOP_LIKE_LOCK":                     "redsync",
		"SHOP_KEY_SCHEME":                    "2",
		"SHOP_KEY_TRANSITION":                "off",
		"SHOP_MIGRATE":                       "true",
		"SHOP_DEMO":                          "true",
		"SHOP_REPLICA_NAME":                  "api-9",
		"SHOP_LAB_TARGET":                    "http://lb:8080",
		"SHOP_LAB_GATEWAY_URL":               "http://lab-gateway:8081",
		"SHOP_LAB_MAILER_URL":                "http://lab-mailer:8082",
		"SHOP_DB_MAX_CONNS":                  "7",
		"SHOP_IDEMPOTENCY_ASYNC_COMMIT":      "true",
		"SHOP_JOB_INTERVAL":                  "250ms",
		"SHOP_SHUTDOWN_DRAIN":                "1m",
		"SHOP_REQUEST_TIMEOUT":               "20s",
		"SHOP_PAYMENT_BUDGET":                "12s",
		"SHOP_TRUSTED_PROXIES":               " 10.0.0.0/8, 192.168.1.7 ,fd00::/8,10.1.2.3/16",
		"SHOP_EVENTS":                        "off",
		"SHOP_EVENTS_REDIS":                  "events:6391",
		"SHOP_EVENTS_PREFIX":                 "stack-2:events:",
		"SHOP_OUTBOX_REDELIVER_AFTER":        "1m",
		"SHOP_OUTBOX_RETENTION":              "48h",
		"SHOP_RATE_LIMIT":                    "off",
		"SHOP_RATE_LIMIT_REDIS":              "limits:6390",
		"SHOP_RATE_LIMIT_TIMEOUT":            "250ms",
		"SHOP_RATE_LIMIT_REGISTER":           "3/h",
		"SHOP_RATE_LIMIT_PUBLIC":             "100/m",
		"SHOP_RATE_LIMIT_WRITES":             "5/s",
		"SHOP_RATE_LIMIT_ORDERS":             "12/m",
		"SHOP_RATE_LIMIT_LIKES":              "30/s",
		"SHOP_RATE_LIMIT_LAB":                "4/m",
		"OTEL_SDK_DISABLED":                  "false",
		"OTEL_TRACES_EXPORTER":               "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://jaeger:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4318/v1/traces",
		"OTEL_TRACES_SAMPLER":                "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":            "0.25",
	}
	if len(vars) != len(allVars) {
		t.Fatalf("test sets %d variables, want all %d", len(vars), len(allVars))
	}
	got, err := FromEnv(env(vars, nil))
	if err != nil {
		t.Fatalf("FromEnv = %v", err)
	}
	want := Config{
		HTTPAddr:               "127.0.0.1:9000",
		MetricsAddr:            "127.0.0.1:9100",
		DatabaseURL:            "postgresql://app:pw@db:5433/shop_prod?sslmode=require",
		RedisAddrs:             []string{"r1:6379", "r2:6379", "r3:6379"},
		AdminToken:             "admin-secret",
		GatewayURL:             "http://gateway:9090",
		GatewayAddr:            ":9090",
		GatewayJournal:         "/data/gw.jsonl",
		GatewaySlowDelay:       20 * time.Second,
		GatewayTimeout:         1500 * time.Millisecond,
		GatewayNoRefundLimit:   true,
		MailerURL:              "http://mailer:8082",
		MailerAddr:             ":9082",
		MailerJournal:          "/data/mail.jsonl",
		MailerKeyTTL:           time.Hour,
		MailerFailRate:         0.25,
		MailerDelay:            750 * time.Millisecond,
		MailerTimeout:          2 * time.Second,
		RequestTimeout:         20 * time.Second,
		PaymentBudget:          12 * time.Second,
		ReconcileAfter:         2 * time.Minute,
		LockMode:               "strict",
		OrderTTL:               30 * time.Minute,
		SeatHoldTTL:            90 * time.Second,
		SeatLock:               "redsync",
		SeatCaps:               SeatCaps{PerHold: 6, Holds: 2, Seats: 8},
		LikeLock:               "redsync",
		KeyScheme:              keyscheme.Scheme{Version: 2},
		Migrate:                true,
		Demo:                   true,
		ReplicaName:            "api-9",
		LabTarget:              "http://lb:8080",
		LabGatewayURL:          "http://lab-gateway:8081",
		LabMailerURL:           "http://lab-mailer:8082",
		DBMaxConns:             7,
		IdempotencyAsyncCommit: true,
		JobInterval:            250 * time.Millisecond,
		ShutdownDrain:          time.Minute,
		TrustedProxies: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("192.168.1.7/32"),
			netip.MustParsePrefix("fd00::/8"),
			netip.MustParsePrefix("10.1.0.0/16"),
		},
		Events:  Events{Off: true, Redis: "events:6391", Prefix: "stack-2:events:", RedeliverAfter: time.Minute, Retention: 48 * time.Hour},
		Tracing: tracing.Settings{Export: true, Sampler: "parentbased_traceidratio", SamplerArg: "0.25"},
		RateLimit: RateLimits{
			Off:      true,
			Redis:    "limits:6390",
			Timeout:  250 * time.Millisecond,
			Register: Rate{3, time.Hour},
			Public:   Rate{100, time.Minute},
			Writes:   Rate{5, time.Second},
			Orders:   Rate{12, time.Minute},
			Likes:    Rate{30, time.Second},
			Lab:      Rate{4, time.Minute},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromEnv =\n%+v\nwant\n%+v", got, want)
	}
}

// Surrounding whitespace (a stray space in a compose file) is not part of
// a value, and a value of only spaces means unset.
func TestFromEnv_Whitespace(t *testing.T) {
	got, err := FromEnv(env(map[string]string{
		"SHOP_LOCK_MODE":   " strict\n",
		"SHOP_ADMIN_TOKEN": "  ",
		"SHOP_ORDER_TTL":   " 1h ",
	}, nil))
	if err != nil {
		t.Fatalf("FromEnv = %v", err)
	}
	if got.LockMode != "strict" || got.AdminToken != "" || got.OrderTTL != time.Hour {
		t.Errorf("LockMode %q, AdminToken %q, OrderTTL %v; want strict, empty, 1h", got.LockMode, got.AdminToken, got.OrderTTL)
	}
}

func TestFromEnv_Invalid(t *testing.T) {
	tests := []struct {
		name, variable, value string
	}{
		{"OrderTTLNotADuration", "SHOP_ORDER_TTL", "15"},
		{"OrderTTLZero", "SHOP_ORDER_TTL", "0s"},
		{"OrderTTLNegative", "SHOP_ORDER_TTL", "-5m"},
		{"SeatHoldTTL", "SHOP_SEAT_HOLD_TTL", "five minutes"},
		{"SeatLock", "SHOP_SEAT_LOCK", "section"},
		{"SeatLockCase", "SHOP_SEAT_LOCK", "Redsync"},
		{"LikeLockNone", "SHOP_LIKE_LOCK", "none"},
		{"LikeLockCase", "SHOP_LIKE_LOCK", "Advisory"},
		{"SeatCapPerHoldZero", "SHOP_SEAT_CAP_PER_HOLD", "0"},
		{"SeatCapPerHoldBeyondTen", "SHOP_SEAT_CAP_PER_HOLD", "11"},
		{"SeatCapHoldsZero", "SHOP_SEAT_CAP_HOLDS", "0"},
		{"SeatCapHoldsNotANumber", "SHOP_SEAT_CAP_HOLDS", "four"},
		{"SeatCapHoldsBeyondAHall", "SHOP_SEAT_CAP_HOLDS", "1301"},
		{"SeatCapSeatsNegative", "SHOP_SEAT_CAP_SEATS", "-1"},
		{"SeatCapSeatsFewerThanAHold", "SHOP_SEAT_CAP_SEATS", "9"},
		{"JobInterval", "SHOP_JOB_INTERVAL", "abc"},
		{"ShutdownDrain", "SHOP_SHUTDOWN_DRAIN", "-1s"},
		{"LockMode", "SHOP_LOCK_MODE", "lenient"},
		{"KeySchemeZero", "SHOP_KEY_SCHEME", "0"},
		{"KeySchemeFuture", "SHOP_KEY_SCHEME", "3"},
		{"KeySchemePrefixed", "SHOP_KEY_SCHEME", "v2"},
		{"KeyTransition", "SHOP_KEY_TRANSITION", "true"},
		{"LockModeCase", "SHOP_LOCK_MODE", "Strict"},
		{"TracesSampler", "OTEL_TRACES_SAMPLER", "sometimes"},
		{"TracesSamplerRatio", "OTEL_TRACES_SAMPLER_ARG", "1.5"},
		{"RedisAddrsOnlyCommas", "SHOP_REDIS_ADDRS", ",,"},
		{"RedisAddrsCommasAndSpaces", "SHOP_REDIS_ADDRS", " , , "},
		{"DatabaseURLMySQL", "SHOP_DATABASE_URL", "mysql://shop:shop@localhost/shop"},
		{"DatabaseURLKeyValue", "SHOP_DATABASE_URL", "host=localhost user=shop"},
		{"DatabaseURLUnparseable", "SHOP_DATABASE_URL", "postgres://shop:shop@local host:bad/shop"},
		{"Migrate", "SHOP_MIGRATE", "yes"},
		{"IdempotencyAsyncCommit", "SHOP_IDEMPOTENCY_ASYNC_COMMIT", "on"},
		{"Demo", "SHOP_DEMO", "yes"},
		{"DemoWithoutAdminToken", "SHOP_DEMO", "true"},
		{"AdminTokenTooLong", "SHOP_ADMIN_TOKEN", strings.Repeat("k", 257)},
		{"GatewayURLNotHTTP", "SHOP_GATEWAY_URL", "ftp://gateway:21"},
		{"DBMaxConnsZero", "SHOP_DB_MAX_CONNS", "0"},
		{"DBMaxConnsNegative", "SHOP_DB_MAX_CONNS", "-3"},
		{"DBMaxConnsNotANumber", "SHOP_DB_MAX_CONNS", "many"},
		{"DBMaxConnsOverflow", "SHOP_DB_MAX_CONNS", "4294967296"},
		{"GatewayURLNoScheme", "SHOP_GATEWAY_URL", "localhost:8081"},
		{"MailerURLNotHTTP", "SHOP_MAILER_URL", "smtp://mailer:25"},
		{"MailerURLNoScheme", "SHOP_MAILER_URL", "mailer:8082"},
		{"MailerKeyTTLZero", "SHOP_MAILER_KEY_TTL", "0s"},
		{"MailerKeyTTLNoUnit", "SHOP_MAILER_KEY_TTL", "24"},
		{"MailerFailRateAboveOne", "SHOP_MAILER_FAIL_RATE", "1.5"},
		{"MailerFailRateNegative", "SHOP_MAILER_FAIL_RATE", "-0.1"},
		{"MailerFailRateNaN", "SHOP_MAILER_FAIL_RATE", "NaN"},
		{"MailerFailRatePercent", "SHOP_MAILER_FAIL_RATE", "20%"},
		{"MailerDelayNegative", "SHOP_MAILER_DELAY", "-1ms"},
		{"MailerDelayNoUnit", "SHOP_MAILER_DELAY", "500"},
		{"MailerDelayBeyondMax", "SHOP_MAILER_DELAY", "21s"},
		{"MailerTimeoutZero", "SHOP_MAILER_TIMEOUT", "0s"},
		{"RequestTimeoutBeyondWriteTimeout", "SHOP_REQUEST_TIMEOUT", "26s"},
		{"PaymentBudgetBeyondRequest", "SHOP_PAYMENT_BUDGET", "8s"},
		{"ReconcileWhileRequestRuns", "SHOP_PAYMENT_RECONCILE_AFTER", "7s"},
		{"RateLimitSwitch", "SHOP_RATE_LIMIT", "false"},
		{"RateLimitSwitchCase", "SHOP_RATE_LIMIT", "Off"},
		{"RateLimitRedisNoPort", "SHOP_RATE_LIMIT_REDIS", "redis-1"},
		{"EventsNeitherOnNorOff", "SHOP_EVENTS", "yes"},
		{"EventsRedisNoPort", "SHOP_EVENTS_REDIS", "redis-1"},
		{"RetentionShorterThanRedelivery", "SHOP_OUTBOX_RETENTION", "10s"},
		{"RateLimitRedisEmptyPort", "SHOP_RATE_LIMIT_REDIS", "redis-1:"},
		{"RateLimitTimeoutZero", "SHOP_RATE_LIMIT_TIMEOUT", "0s"},
		{"RateLimitTimeoutNoUnit", "SHOP_RATE_LIMIT_TIMEOUT", "100"},
		{"RateNoUnit", "SHOP_RATE_LIMIT_REGISTER", "10"},
		{"RateUnknownUnit", "SHOP_RATE_LIMIT_PUBLIC", "10/d"},
		{"RateSpelledOut", "SHOP_RATE_LIMIT_WRITES", "60/minute"},
		{"RateZero", "SHOP_RATE_LIMIT_ORDERS", "0/h"},
		{"RateNegative", "SHOP_RATE_LIMIT_ORDERS", "-1/h"},
		{"RateTooLarge", "SHOP_RATE_LIMIT_PUBLIC", "1000001/s"},
		{"RateFraction", "SHOP_RATE_LIMIT_REGISTER", "0.5/s"},
		{"RateDuration", "SHOP_RATE_LIMIT_WRITES", "10/5m"},
		{"TrustedProxyHostname", "SHOP_TRUSTED_PROXIES", "lb"},
		{"TrustedProxyBadBits", "SHOP_TRUSTED_PROXIES", "10.0.0.0/33"},
		{"TrustedProxyOneBadOfTwo", "SHOP_TRUSTED_PROXIES", "10.0.0.0/8,172.16.0.0/x"},
		{"TrustedProxyZone", "SHOP_TRUSTED_PROXIES", "fe80::1%eth0"},
		{"MetricsAddrNoPort", "SHOP_METRICS_ADDR", "localhost"},
		{"MetricsAddrEmptyPort", "SHOP_METRICS_ADDR", "localhost:"},
		// The API's default port: /metrics would be on the API's port again.
		{"MetricsAddrIsAPIPort", "SHOP_METRICS_ADDR", ":8080"},
		{"MetricsAddrIsAPIPortOnAHost", "SHOP_METRICS_ADDR", "127.0.0.1:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromEnv(env(map[string]string{tt.variable: tt.value}, nil))
			if err == nil {
				t.Fatalf("FromEnv(%s=%q) = nil, want an error", tt.variable, tt.value)
			}
			if !strings.Contains(err.Error(), tt.variable) {
				t.Errorf("error %q does not name %s", err, tt.variable)
			}
			// Only the bad variable is blamed.
			for _, other := range allVars {
				if other != tt.variable && strings.Contains(err.Error(), other+":") {
					t.Errorf("error %q blames %s too", err, other)
				}
			}
		})
	}
}

// The mailer's faults may each be off (0) or at their bound.
func TestFromEnv_MailerFaults(t *testing.T) {
	tests := []struct {
		rate, delay string
		wantRate    float64
		wantDelay   time.Duration
	}{
		{"0", "0", 0, 0},
		{"0.0", "0s", 0, 0},
		{"1", "20s", 1, MaxMailerDelay},
		{" 0.5 ", "1.5s", 0.5, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		got, err := FromEnv(env(map[string]string{"SHOP_MAILER_FAIL_RATE": tt.rate, "SHOP_MAILER_DELAY": tt.delay}, nil))
		if err != nil || got.MailerFailRate != tt.wantRate || got.MailerDelay != tt.wantDelay {
			t.Errorf("rate %q, delay %q: got %v, %v, %v; want %v, %v, nil",
				tt.rate, tt.delay, got.MailerFailRate, got.MailerDelay, err, tt.wantRate, tt.wantDelay)
		}
	}
}

// The timings of a pay request fit inside each other: the budget plus the
// answer's margin inside the request timeout, the request timeout inside
// the server's write timeout, and the reconciler's delay beyond the budget.
func TestFromEnv_Timings(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want string // a fragment of the error; "" for none
	}{
		{"Defaults", nil, ""},
		{"BudgetFitsExactly", map[string]string{"SHOP_REQUEST_TIMEOUT": "5s", "SHOP_PAYMENT_BUDGET": "2s"}, ""},
		{"BudgetTooLong", map[string]string{"SHOP_REQUEST_TIMEOUT": "5s", "SHOP_PAYMENT_BUDGET": "2001ms"},
			"SHOP_PAYMENT_BUDGET: 2.001s does not fit SHOP_REQUEST_TIMEOUT 5s"},
		{"RequestTimeoutShortened", map[string]string{"SHOP_REQUEST_TIMEOUT": "9s"},
			"SHOP_PAYMENT_BUDGET: 7s does not fit SHOP_REQUEST_TIMEOUT 9s"},
		{"LongestRequest", map[string]string{"SHOP_REQUEST_TIMEOUT": "25s", "SHOP_PAYMENT_BUDGET": "22s"}, ""},
		{"ReconcilerTooEarly", map[string]string{"SHOP_PAYMENT_RECONCILE_AFTER": "7s"},
			"SHOP_PAYMENT_RECONCILE_AFTER: 7s must be longer than SHOP_PAYMENT_BUDGET 7s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(env(tc.vars, nil))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("FromEnv = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("FromEnv = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// An operator fixing a broken environment sees every problem at once.
func TestFromEnv_AllErrors(t *testing.T) {
	bad := map[string]string{
		"SHOP_ORDER_TTL":      "x",
		"SHOP_SEAT_HOLD_TTL":  "0",
		"SHOP_JOB_INTERVAL":   "-1s",
		"SHOP_SHUTDOWN_DRAIN": "soon",
		"SHOP_LOCK_MODE":      "sometimes",
		"SHOP_REDIS_ADDRS":    ",",
		"SHOP_DATABASE_URL":   "mysql://x",
		"SHOP_MIGRATE":        "maybe",
		"SHOP_DB_MAX_CONNS":   "0",
		"SHOP_GATEWAY_URL":    "gateway",

		"SHOP_TRUSTED_PROXIES":     "everyone",
		"SHOP_RATE_LIMIT":          "sometimes",
		"SHOP_RATE_LIMIT_REDIS":    "nowhere",
		"SHOP_RATE_LIMIT_TIMEOUT":  "fast",
		"SHOP_RATE_LIMIT_REGISTER": "10",
		"SHOP_RATE_LIMIT_PUBLIC":   "x/s",
		"SHOP_RATE_LIMIT_WRITES":   "0/m",
		"SHOP_RATE_LIMIT_ORDERS":   "30/week",
		"SHOP_RATE_LIMIT_LIKES":    "many/m",
		"SHOP_METRICS_ADDR":        "9090",
	}
	_, err := FromEnv(env(bad, nil))
	if err == nil {
		t.Fatal("FromEnv = nil, want an error")
	}
	for name := range bad {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
	if got := len(strings.Split(err.Error(), "\n")); got != len(bad) {
		t.Errorf("error has %d lines, want one per bad variable (%d):\n%v", got, len(bad), err)
	}
}

func TestFromEnv_ParseBool(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "1": true, "TRUE": true, "false": false, "0": false} {
		got, err := FromEnv(env(map[string]string{"SHOP_MIGRATE": value}, nil))
		if err != nil || got.Migrate != want {
			t.Errorf("SHOP_MIGRATE=%s: Migrate = %v, %v; want %v, nil", value, got.Migrate, err, want)
		}
	}
}

// logged renders c the way main logs it.
func logged(t *testing.T, c Config) string {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	return buf.String()
}

func TestLogValue(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"SHOP_DATABASE_URL": "postgres://app:s3cr3t-pw@db:5432/shop?sslmode=disable",
		"SHOP_ADMIN_TOKEN":  "adm1n-t0ken",
		"SHOP_REDIS_ADDRS":  "r1:6379,r2:6379",
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	out := logged(t, c)
	for _, secret := range []string{"s3cr3t-pw", "adm1n-t0ken"} {
		if strings.Contains(out, secret) {
			t.Errorf("log reveals %q: %s", secret, out)
		}
	}
	var line struct {
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("log line %q: %v", out, err)
	}
	want := map[string]any{
		"http_addr":       ":8080",
		"metrics_addr":    ":9090",
		"database_url":    "postgres://app:xxxxx@db:5432/shop?sslmode=disable",
		"admin_token_set": true,
		"gateway_url":     "http://localhost:8081",
		"mailer_url":      "",
		"lock_mode":       "degrade",
		"migrate":         false,
	}
	for k, v := range want {
		if line.Config[k] != v {
			t.Errorf("%s = %v, want %v", k, line.Config[k], v)
		}
	}
	if got, ok := line.Config["redis_addrs"].([]any); !ok || len(got) != 2 {
		t.Errorf("redis_addrs = %v, want both nodes", line.Config["redis_addrs"])
	}
}

func TestLogValue_URLs(t *testing.T) {
	tests := []struct {
		name, url, want string
	}{
		{"NoPassword", "postgres://shop@db/shop", "postgres://shop@db/shop"},
		{"Password", "postgres://shop:pw@db/shop", "postgres://shop:xxxxx@db/shop"},
		{"EscapedPassword", "postgres://shop:p%40ss%2Fw0rd@db/shop", "postgres://shop:xxxxx@db/shop"},
		{"EmptyPassword", "postgres://shop:@db/shop", "postgres://shop:xxxxx@db/shop"},
		{"PasswordInQuery", "postgres://shop@db/shop?password=s3cret&sslmode=disable", "postgres://shop@db/shop?password=xxxxx&sslmode=disable"},
		{"SSLPasswordInQuery", "postgres://shop@db/shop?sslpassword=s3cret", "postgres://shop@db/shop?sslpassword=xxxxx"},
		{"Unparseable", "postgres://shop:pw@db:port/shop", "(unparseable)"},
		{"MultiHost", "postgres://shop:pw@pg-a:5432,pg-b:5432/shop?target_session_attrs=read-write",
			"postgres://shop:xxxxx@pg-a:5432,pg-b:5432/shop?target_session_attrs=read-write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := logged(t, Config{DatabaseURL: tt.url})
			var line struct {
				Config map[string]any `json:"config"`
			}
			if err := json.Unmarshal([]byte(out), &line); err != nil {
				t.Fatal(err)
			}
			if got := line.Config["database_url"]; got != tt.want {
				t.Errorf("database_url = %v, want %s", got, tt.want)
			}
		})
	}
}

// A primary and its standby in one URL, in either of the forms pgx takes
// (hosts in the authority, or host and port lists in the query), with
// target_session_attrs=read-write: every connection goes to whichever
// accepts writes (DESIGN.md, "PostgreSQL failover").
func TestFromEnv_MultiHostDatabaseURL(t *testing.T) {
	for _, u := range []string{
		"postgres://shop:pw@pg-a:5432,pg-b:5432/shop?sslmode=disable&target_session_attrs=read-write",
		"postgres://shop:pw@/shop?host=pg-a,pg-b&port=5432,5433&target_session_attrs=read-write",
	} {
		got, err := FromEnv(env(map[string]string{"SHOP_DATABASE_URL": u}, nil))
		if err != nil {
			t.Errorf("SHOP_DATABASE_URL=%s: %v", u, err)
			continue
		}
		if got.DatabaseURL != u {
			t.Errorf("DatabaseURL = %q, want %q", got.DatabaseURL, u)
		}
	}
}

// A URL libpq accepts with a socket directory as its host, percent-encoded
// in the authority, is accepted; it comes back in the form net/url reads
// too (the host in the query), which the migrations' driver and the lab
// set parameters on, naming the same socket.
func TestFromEnv_SocketDirectoryDatabaseURL(t *testing.T) {
	for u, want := range map[string]string{
		"postgres://%2Fvar%2Frun%2Fpostgresql/db":               "postgres:///db?host=%2Fvar%2Frun%2Fpostgresql",
		"postgresql://shop:pw@%2Ftmp:5440/shop?sslmode=disable": "postgresql://shop:pw@/shop?host=%2Ftmp&port=5440&sslmode=disable",
	} {
		got, err := FromEnv(env(map[string]string{"SHOP_DATABASE_URL": u}, nil))
		if err != nil {
			t.Errorf("SHOP_DATABASE_URL=%s: %v", u, err)
			continue
		}
		if got.DatabaseURL != want {
			t.Errorf("SHOP_DATABASE_URL=%s: DatabaseURL = %q, want %q", u, got.DatabaseURL, want)
		}
	}
}

func TestLogValue_NoAdminToken(t *testing.T) {
	out := logged(t, Config{})
	if !strings.Contains(out, `"admin_token_set":false`) {
		t.Errorf("log %s does not say the admin token is unset", out)
	}
}

// The error for a bad database URL is printed at start; it must not carry
// the password the URL holds.
func TestFromEnv_DatabaseURLErrorMasked(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"SHOP_DATABASE_URL": "mysql://app:s3cr3t-pw@db/shop"}, nil))
	if err == nil {
		t.Fatal("FromEnv = nil, want an error")
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Errorf("error %q reveals the password", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{
		"1/s":       {1, time.Second},
		"10/m":      {10, time.Minute},
		"30/h":      {30, time.Hour},
		"1000000/s": {1_000_000, time.Second},
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("ParseRate(%q).String() = %q, want it back", in, got.String())
		}
	}
}

// The switch reads only on and off; everything else names the variable
// (TestFromEnv_Invalid), so a typo never turns the limits off.
func TestFromEnv_RateLimitSwitch(t *testing.T) {
	for value, off := range map[string]bool{"": false, "on": false, " on ": false, "off": true} {
		got, err := FromEnv(env(map[string]string{"SHOP_RATE_LIMIT": value}, nil))
		if err != nil || got.RateLimit.Off != off {
			t.Errorf("SHOP_RATE_LIMIT=%q: Off = %v, %v; want %v, nil", value, got.RateLimit.Off, err, off)
		}
	}
}

// The metrics take a port of their own; only a clash with the API's is
// refused.
func TestFromEnv_MetricsAddr(t *testing.T) {
	tests := []struct {
		name, http, metrics string
		ok                  bool
	}{
		{"Defaults", "", "", true},
		{"OwnPort", ":8080", "127.0.0.1:9100", true},
		{"SamePortOtherHost", "10.0.0.1:8080", "127.0.0.1:8080", true},
		{"SamePortWildcardAPI", "0.0.0.0:8080", "127.0.0.1:8080", false},
		{"SamePort", ":9000", ":9000", false},
		{"EphemeralBoth", "127.0.0.1:0", "127.0.0.1:0", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromEnv(env(map[string]string{"SHOP_HTTP_ADDR": tt.http, "SHOP_METRICS_ADDR": tt.metrics}, nil))
			if (err == nil) != tt.ok {
				t.Errorf("SHOP_HTTP_ADDR=%q SHOP_METRICS_ADDR=%q: %v, want ok=%t", tt.http, tt.metrics, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "SHOP_METRICS_ADDR") {
				t.Errorf("error %q does not name SHOP_METRICS_ADDR", err)
			}
		})
	}
}
