package lock

import (
	"context"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// A Locker with its own wait budget gives up after that budget on a key
// the parent holds (same nodes, same keys), counts into the same metrics,
// and leaves the parent's budget as it was.
func TestLocker_WithWaitBudget(t *testing.T) {
	m := metrics.New()
	parent := mustLocker(t, testenv.RedisAddrs(t), Options{WaitBudget: 3 * time.Second, Metrics: m})
	const budget = 150 * time.Millisecond
	short, err := parent.WithWaitBudget(budget)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	release := holdLock(t, parent, key)
	defer release()

	start := time.Now()
	err = short.Do(context.Background(), key, func(context.Context) error { return nil })
	elapsed := time.Since(start)
	if problem.CodeOf(err) != problem.ResourceBusy {
		t.Fatalf("Do on a key the parent holds = %v, want %s", err, problem.ResourceBusy)
	}
	if elapsed < budget*3/4 || elapsed > 2*time.Second {
		t.Errorf("gave up after %v, want about %v (the parent's budget is 3s)", elapsed, budget)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "busy"); got != 1 {
		t.Errorf("busy = %v in the shared metrics, want 1", got)
	}
	if parent.waitBudget != 3*time.Second {
		t.Errorf("the parent's budget became %v", parent.waitBudget)
	}
	for _, bad := range []time.Duration{0, -time.Second} {
		if _, err := parent.WithWaitBudget(bad); err == nil {
			t.Errorf("WithWaitBudget(%v) = nil error, want a refusal", bad)
		}
	}
}
