package payments_test

import (
	"context"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// failFastClicks is how many clicks, each with a key of its own, pay one
// order at once.
const failFastClicks = 24

// TestPay_LosersFailFast: many clicks on one order at once, each with a
// fresh key, while the first charge is held at the gateway until every
// other click has been answered. The losers are answered while the
// winner still holds the order's lock: from the database when they find
// the order paying, or after at most payments.LockTries attempts on the
// lock, never by waiting for it. The customer is charged once.
//
// WithoutTries is the lock as every other flow has it, with its 2 s
// budget and no bound on tries: the losers that reach the lock before
// the winner's begin commits spin on it for the whole budget, each try a
// SET NX on every node and a release. That is the storm the bound stops;
// the charge stays single either way.
func TestPay_LosersFailFast(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL, Redis and a gateway")
	}
	for _, tc := range []struct {
		name       string
		unbounded  bool // the lock without WithTries
		wantQueued bool
	}{
		{name: "LockTries"},
		{name: "WithoutTries", unbounded: true, wantQueued: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The winner's charge stays in flight (its lock held, its order
			// paying) until every loser has its answer.
			answered := make(chan struct{}, failFastClicks)
			var f *fixture
			f = newFixtureWith(t, gateway.Options{AfterCharge: func(gateway.Charge) {
				timeout := time.After(20 * time.Second)
				for range failFastClicks - 1 {
					select {
					case <-answered:
					case <-timeout:
						t.Error("the losers were not all answered while the winner's charge was in flight")
						return
					}
				}
			}})
			m := metrics.New()
			svc := f.serviceLockedBy(t, f.lockOn(t, m, !tc.unbounded), m)
			users, ids := f.mustCreateOrders(t, 1)

			var mu sync.Mutex
			codes := map[string]int{}
			testenv.Together(failFastClicks, func(int) {
				_, err := svc.Pay(context.Background(), users[0], newKey(), ids[0], gateway.MethodOK)
				code := "ok"
				if err != nil {
					answered <- struct{}{}
					code = string(problem.CodeOf(err))
					if code == "" {
						code = err.Error()
					}
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
			t.Logf("answers: %v", codes)

			// One charge, at the gateway and in the database; the losers
			// began nothing.
			for _, b := range f.doubleCharges(t, ids) {
				t.Error(b)
			}
			if n := f.mustInt(t, `SELECT count(*) FROM payments WHERE order_id = $1`, ids[0]); n != 1 {
				t.Errorf("%d payments of the order, want 1: a loser began one", n)
			}
			if codes["ok"] != 1 || codes[string(problem.ResourceBusy)] != failFastClicks-1 {
				t.Errorf("answers %v; want one success and %d resource_busy", codes, failFastClicks-1)
			}

			// Who was answered where: the database refused those that found
			// the order paying; the lock, those that read it pending.
			fromDB := counterValue(t, m, "shop_conflicts_stopped_total", "flow", payments.FlowPay, "layer", "state")
			atLock := counterValue(t, m, "shop_lock_acquisitions_total", "outcome", "busy")
			tries := histogramOf(t, m, "shop_lock_tries")
			t.Logf("%v refused from the database, %v at the lock; %d acquisitions made %v tries, the most %v",
				fromDB, atLock, tries.GetSampleCount(), tries.GetSampleSum(), mostTries(tries))
			if fromDB+atLock != failFastClicks-1 {
				t.Errorf("%v refused from the database and %v at the lock, want %d in all", fromDB, atLock, failFastClicks-1)
			}
			if tc.wantQueued {
				if atLock == 0 || mostTries(tries) <= payments.LockTries {
					t.Fatalf("without the bound, %v losers at the lock made at most %v tries: this case shows no queue",
						atLock, mostTries(tries))
				}
				return
			}
			if most := mostTries(tries); most > payments.LockTries {
				t.Errorf("an acquisition made up to %v tries, want at most %d: a loser queued on the lock", most, payments.LockTries)
			}
		})
	}
}

// serviceLockedBy is a payment service with every layer on, locking with
// locker and counting into m.
func (f *fixture) serviceLockedBy(t *testing.T, locker layers.Locker, m *metrics.Metrics) *payments.Service {
	t.Helper()
	gw, err := payments.NewGateway(f.gwURL, payments.GatewayOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	svc, err := payments.NewService(payments.Config{
		DB: f.pool, Gateway: gw, Locker: locker,
		Metrics: m, Now: f.clock.Now, Budget: 30 * time.Second, ReconcileAfter: time.Minute,
	})
	if err != nil {
		t.Fatalf("payments.NewService: %v", err)
	}
	return svc
}

// counterValue reads the counter name whose labels include the pairs
// given, 0 when it has no such series.
func counterValue(t *testing.T, m *metrics.Metrics, name string, labelPairs ...string) float64 {
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
			if hasLabels(s, labelPairs) {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// histogramOf reads the unlabelled histogram name.
func histogramOf(t *testing.T, m *metrics.Metrics, name string) *dto.Histogram {
	t.Helper()
	ms := family(t, m, name).GetMetric()
	if len(ms) != 1 {
		t.Fatalf("%s has %d series, want 1", name, len(ms))
	}
	return ms[0].GetHistogram()
}

// mostTries is the smallest bucket bound of h that holds every sample.
func mostTries(h *dto.Histogram) float64 {
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() == h.GetSampleCount() {
			return b.GetUpperBound()
		}
	}
	return float64(^uint(0) >> 1)
}

func family(t *testing.T, m *metrics.Metrics, name string) *dto.MetricFamily {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, fam := range families {
		if fam.GetName() == name {
			return fam
		}
	}
	t.Fatalf("%s is not registered", name)
	return nil
}

func hasLabels(s *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
