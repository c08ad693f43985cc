package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

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
