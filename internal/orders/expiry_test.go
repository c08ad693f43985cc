package orders_test

import (
	"context"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// The expiry job's last success is what the stall alert watches
// (deploy/prometheus, ShopJobStalled): a run that got through the due
// orders records it; a run that failed leaves the one before, so a job
// that keeps failing is seen as stalled.
func TestExpiry_RecordsSuccess(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := metrics.New()
	svc, err := orders.NewService(orders.Config{
		DB: f.pool, Locker: f.redis(), Metrics: m,
		OrderTTL: 15 * time.Minute, Now: f.clock.Now,
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	f.mustCreateProduct(t, "SKU-1", 10)
	user := f.mustCreateUsers(t, 1)[0]
	if _, err := svc.Create(context.Background(), user, key(1), line("SKU-1", 1)); err != nil {
		t.Fatalf("create: %v", err)
	}

	// The job's start is the first mark: before a first success, the
	// time without one counts from there.
	started := f.clock.Now()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	svc.RunExpiry(stopped, time.Hour)
	if got, ok := jobSuccess(t, m, "expire_orders"); !ok || got != seconds(started) {
		t.Fatalf("after the job started: last success %v (recorded %v), want its start %v", got, ok, seconds(started))
	}

	f.clock.Advance(16 * time.Minute)
	if _, err := svc.ExpireDue(stopped); err == nil {
		t.Fatal("ExpireDue on a cancelled context succeeded; the test needs a failing run")
	}
	if got, _ := jobSuccess(t, m, "expire_orders"); got != seconds(started) {
		t.Fatalf("a failed run recorded a success at %v; the last one was %v", got, seconds(started))
	}

	n, err := svc.ExpireDue(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v; want 1 order expired", n, err)
	}
	if got, _ := jobSuccess(t, m, "expire_orders"); got != seconds(f.clock.Now()) {
		t.Fatalf("after a successful run: last success %v, want %v", got, seconds(f.clock.Now()))
	}
}

// jobSuccess reads shop_job_last_success_timestamp_seconds{task} from m, and
// whether it is there at all.
func jobSuccess(t *testing.T, m *metrics.Metrics, job string) (float64, bool) {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "shop_job_last_success_timestamp_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "task" && l.GetValue() == job {
					return s.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
