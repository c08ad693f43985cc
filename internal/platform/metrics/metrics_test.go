package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/platform/metrics"
)

func TestStopped(t *testing.T) {
	var none *metrics.Metrics
	none.Stopped("create_order", metrics.LayerLock) // a nil Metrics counts nothing, and does not panic

	m := metrics.New()
	m.Stopped("create_order", metrics.LayerConstraint)
	m.Stopped("create_order", metrics.LayerConstraint)
	m.Stopped("cancel_order", metrics.LayerVersion)

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
