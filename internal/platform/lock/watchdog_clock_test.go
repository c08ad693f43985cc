package lock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The watchdog's timing, on synctest's clock over nodes held in memory:
// the production lease (8 s), a minute of work, and every moment exact.
// The tests against real Redis (watchdog_test.go) show the same scripts
// run on a real node.

// TestWatchdogClock_KeepsLease: a minute of work under an 8 s lease. A
// second caller tries every second and never gets in; the lease is
// extended once per Expiry/3, 22 times in 60 s, and never lost. Without
// the watchdog the second caller gets in at 8 s.
func TestWatchdogClock_KeepsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, pools := memNodes(3)
		m := metrics.New()
		l := memLocker(t, pools, Options{Metrics: m})
		other := memLocker(t, pools, Options{WaitBudget: 50 * time.Millisecond})
		const key = "order:1"

		start := time.Now()
		err := l.Do(t.Context(), key, func(ctx context.Context) error {
			for second := range 60 {
				err := other.Do(t.Context(), key, func(context.Context) error {
					return errors.New("second holder got in")
				})
				if problem.CodeOf(err) != problem.ResourceBusy {
					t.Errorf("at %s: other Do = %v, want %s", time.Since(start), err, problem.ResourceBusy)
					return nil
				}
				time.Sleep(time.Until(start.Add(time.Duration(second+1) * time.Second)))
			}
			if ctx.Err() != nil {
				t.Errorf("work context ended while the lease was kept: %v", context.Cause(ctx))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Do = %v, want nil", err)
		}
		interval := DefaultExpiry / 3
		if got, want := metricValue(t, m, "shop_lock_extensions_total", "result", "ok"), float64(time.Minute/interval); got != want {
			t.Errorf("extensions = %v, want %v: one per %s for a minute", got, want, interval)
		}
		if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "lost"); got != 0 {
			t.Errorf("lost = %v, want 0", got)
		}
		for i, n := range nodes {
			if n.has(DefaultPrefix + key) {
				t.Errorf("node %d still holds the lock after Do returned", i)
			}
		}
	})
}

// TestWatchdogClock_LostLockStopsWork: the lease is gone from every node
// (it ran out during a pause and went elsewhere). The work is cancelled
// with cause ErrLockLost at the next extension, one Expiry/3 later, not
// at the end of the work.
func TestWatchdogClock_LostLockStopsWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, pools := memNodes(3)
		m := metrics.New()
		l := memLocker(t, pools, Options{Metrics: m})
		const key = "order:1"

		var cause error
		var stoppedAfter time.Duration
		err := l.Do(t.Context(), key, func(ctx context.Context) error {
			for _, n := range nodes {
				n.del(DefaultPrefix + key)
			}
			lost := time.Now()
			select {
			case <-ctx.Done():
				stoppedAfter, cause = time.Since(lost), context.Cause(ctx)
				return ctx.Err()
			case <-time.After(time.Minute):
				return errors.New("work context not cancelled after the lease was lost")
			}
		})
		if !errors.Is(cause, ErrLockLost) || !errors.Is(err, ErrLockLost) {
			t.Errorf("cause %v, Do = %v; want both to match ErrLockLost", cause, err)
		}
		if want := DefaultExpiry / 3; stoppedAfter != want {
			t.Errorf("work stopped %s after the lease was lost, want %s (the next extension)", stoppedAfter, want)
		}
		if got := metricValue(t, m, "shop_lock_extensions_total", "result", "failed"); got != 1 {
			t.Errorf("failed extensions = %v, want 1", got)
		}
	})
}

// TestWatchdogClock_HungNodesStopWorkBeforeLeaseEnds: the nodes stop
// answering while the work runs. The extension waits at most Expiry/3,
// so the work is told to stop at two thirds of the lease: before the
// lease could run out and another caller could take the lock.
func TestWatchdogClock_HungNodesStopWorkBeforeLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, pools := memNodes(3)
		m := metrics.New()
		l := memLocker(t, pools, Options{Metrics: m})

		var stoppedAfter time.Duration
		start := time.Now()
		err := l.Do(t.Context(), "order:1", func(ctx context.Context) error {
			for _, n := range nodes {
				n.hang()
			}
			select {
			case <-ctx.Done():
				stoppedAfter = time.Since(start)
				return ctx.Err()
			case <-time.After(time.Minute):
				return errors.New("work context not cancelled while no node answered")
			}
		})
		if !errors.Is(err, ErrLockLost) {
			t.Errorf("Do = %v, want an error matching ErrLockLost", err)
		}
		if want := 2 * (DefaultExpiry / 3); stoppedAfter != want {
			t.Errorf("work stopped %s after the lock was taken, want %s (a tick, then an extension that timed out)", stoppedAfter, want)
		}
		if stoppedAfter >= DefaultExpiry {
			t.Errorf("work stopped %s after the lock was taken: not before its %s lease could end", stoppedAfter, DefaultExpiry)
		}
	})
}
