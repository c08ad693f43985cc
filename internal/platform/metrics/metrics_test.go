package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shop-example/shop/internal/platform/metrics"
)

func TestStopped(t *testing.T) {
	var none *metrics.Metrics
	none.Stopped("create_order", "lock") // a nil Metrics counts nothing, and does not panic

	m := metrics.New()
	m.Stopped("create_order", "constraint")
	m.Stopped("create_order", "constraint")
	m.Stopped("cancel_order", "version")

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`shop_conflicts_stopped_total{flow="create_order",layer="constraint"} 2`,
		`shop_conflicts_stopped_total{flow="cancel_order",layer="version"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestJobSucceeded(t *testing.T) {
	var none *metrics.Metrics
	none.JobSucceeded("expire_orders", time.Now()) // a nil Metrics records nothing, and does not panic

	m := metrics.New()
	m.JobStarted("expire_orders", time.Unix(1700000000, 0))
	m.JobSucceeded("reconcile_payments", time.Unix(1700000000, 0))
	m.JobSucceeded("reconcile_payments", time.Unix(1700000060, 500_000_000))

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`shop_job_last_success_timestamp_seconds{task="expire_orders"} 1.7e+09`,
		`shop_job_last_success_timestamp_seconds{task="reconcile_payments"} 1.7000000605e+09`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grep(string(body), "shop_job_"))
		}
	}
}

// grep returns the lines of s that contain substr.
func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A second instance of a component on one registry counts into the
// first one's series; a collector of the same name and another shape is
// refused, and comes back unregistered with the error.
func TestShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "shop_things_total", Help: "Things."}
	first, err := metrics.Shared(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatalf("first: %v", err)
	}
	second, err := metrics.Shared(reg, prometheus.NewCounter(opts))
	if err != nil || second != first {
		t.Fatalf("second = %v, %v; want the first collector back", second, err)
	}
	second.Inc()
	want := `
# HELP shop_things_total Things.
# TYPE shop_things_total counter
shop_things_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shop_things_total"); err != nil {
		t.Errorf("want one series for both, at 1: %v", err)
	}

	other := prometheus.NewCounterVec(opts, []string{"kind"})
	got, err := metrics.Shared(reg, other)
	if err == nil || got != other {
		t.Errorf("another shape = %v, %v; want itself and an error", got, err)
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "shop_a_total", Help: "A."})
	b := prometheus.NewGauge(prometheus.GaugeOpts{Name: "shop_b", Help: "B."})
	if err := metrics.Register(reg, a, b); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := metrics.Register(reg, b); err == nil {
		t.Error("registering b twice = nil, want an error")
	}
}
