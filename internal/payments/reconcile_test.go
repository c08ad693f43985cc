package payments_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// What the reconciler could not settle is what the backlog alerts read
// (deploy/prometheus, ShopPaymentReconcileBacklog and
// ShopPaymentStuckProcessing), and a pass that could not even list the
// due payments is not a success (ShopJobStalled). With the gateway down,
// every due payment stays processing and is counted with its age; once a
// pass settles them, both gauges go back to 0.
func TestReconcile_Backlog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users, ids := f.mustCreateOrders(t, 3)
	down, downMetrics := f.serviceOn(t, "http://127.0.0.1:1") // nothing listens on port 1
	began := f.clock.Now()
	for i := range ids {
		if _, err := down.Pay(context.Background(), users[i], newKey(), ids[i], gateway.MethodOK); !errors.Is(err, payments.ErrOutcomeUnknown) {
			t.Fatalf("pay %d with the gateway down: %v, want the outcome unknown", i, err)
		}
	}
	f.clock.Advance(2 * time.Minute) // past the fixture's reconcile delay

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := down.Reconcile(stopped); err == nil {
		t.Fatal("Reconcile on a cancelled context succeeded; the test needs a failing pass")
	}
	if got, ok := gauge(t, downMetrics, "shop_job_last_success_timestamp_seconds", "task", "reconcile_payments"); ok {
		t.Fatalf("a pass that could not list the due payments recorded a success at %v", got)
	}

	if n, err := down.Reconcile(context.Background()); err != nil || n != 0 {
		t.Fatalf("Reconcile with the gateway down = %d, %v; want 0 settled", n, err)
	}
	now := f.clock.Now()
	if got, _ := gauge(t, downMetrics, "shop_job_last_success_timestamp_seconds", "task", "reconcile_payments"); got != float64(now.UnixNano())/1e9 {
		t.Errorf("last success %v, want the pass's time %v", got, float64(now.UnixNano())/1e9)
	}
	if got := mustGauge(t, downMetrics, "shop_payment_reconcile_backlog"); got != 3 {
		t.Errorf("backlog %v after a pass that settled nothing, want 3", got)
	}
	if got, want := mustGauge(t, downMetrics, "shop_payment_reconcile_oldest_seconds"), now.Sub(began).Seconds(); got != want {
		t.Errorf("oldest unsettled payment %vs old, want %vs", got, want)
	}

	up, upMetrics := f.serviceOn(t, f.gwURL)
	if n, err := up.Reconcile(context.Background()); err != nil || n != 3 {
		t.Fatalf("Reconcile with the gateway up = %d, %v; want 3 settled", n, err)
	}
	for _, name := range []string{"shop_payment_reconcile_backlog", "shop_payment_reconcile_oldest_seconds"} {
		if got := mustGauge(t, upMetrics, name); got != 0 {
			t.Errorf("%s = %v after a pass that settled every due payment, want 0", name, got)
		}
	}
}

// serviceOn builds a payment service whose gateway is at url, with metrics
// of its own.
func (f *fixture) serviceOn(t *testing.T, url string) (*payments.Service, *metrics.Metrics) {
	t.Helper()
	gw, err := payments.NewGateway(url, payments.GatewayOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	m := metrics.New()
	svc, err := payments.NewService(payments.Config{
		DB: f.pool, Gateway: gw, Locker: lock.None{},
		Metrics: m, Now: f.clock.Now, Budget: 20 * time.Second, ReconcileAfter: time.Minute,
	})
	if err != nil {
		t.Fatalf("payments.NewService: %v", err)
	}
	return svc, m
}

// gauge reads the gauge name{label=value} (or name, unlabelled) from m,
// and whether it is there at all.
func gauge(t *testing.T, m *metrics.Metrics, name string, labelPair ...string) (float64, bool) {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, s := range fam.GetMetric() {
			if len(labelPair) == 0 {
				return s.GetGauge().GetValue(), true
			}
			for _, l := range s.GetLabel() {
				if l.GetName() == labelPair[0] && l.GetValue() == labelPair[1] {
					return s.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func mustGauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	v, ok := gauge(t, m, name)
	if !ok {
		t.Fatalf("%s is not registered", name)
	}
	return v
}
