package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The lease is 300 ms and the work lasts until the watchdog has extended
// it four times (400 ms or more): without the watchdog the lock would
// expire under the work and a second caller would get in. The timing
// itself is checked exactly on synctest's clock (watchdog_clock_test.go);
// this runs the extension against real Redis.
func TestWatchdog_KeepsLeaseAcrossLongWork(t *testing.T) {
	const extensions = 4
	addrs := testenv.RedisAddrs(t)
	m := metrics.New()
	l := mustLocker(t, addrs, Options{Expiry: 300 * time.Millisecond, Metrics: m})
	other := mustLocker(t, addrs, Options{Expiry: 300 * time.Millisecond, WaitBudget: 50 * time.Millisecond})
	key := uniqueKey(t)

	err := l.Do(context.Background(), key, func(ctx context.Context) error {
		deadline := time.Now().Add(30 * time.Second)
		for metricValue(t, m, "shop_lock_extensions_total", "result", "ok") < extensions {
			if ctx.Err() != nil || time.Now().After(deadline) {
				t.Errorf("work context ended (%v) or 30 s passed before %d extensions", context.Cause(ctx), extensions)
				return nil
			}
			err := other.Do(context.Background(), key, func(context.Context) error {
				return errors.New("second holder got in")
			})
			if problem.CodeOf(err) != problem.ResourceBusy {
				t.Errorf("other Do during the work = %v, want %s", err, problem.ResourceBusy)
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Errorf("work context ended while the lease was kept: %v", context.Cause(ctx))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil", err)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "lost"); got != 0 {
		t.Errorf("lost = %v, want 0", got)
	}
	if got := metricValue(t, m, "shop_lock_hold_seconds"); got != 1 {
		t.Errorf("hold observations = %v, want 1", got)
	}
	assertReleased(t, addrs, DefaultPrefix+key)
}

// Deleting the key on every node stands for a lease that ran out during a
// pause and went to someone else: the next extension fails and the work is
// told to stop.
func TestWatchdog_LostLockCancelsWork(t *testing.T) {
	addrs := testenv.RedisAddrs(t)
	m := metrics.New()
	l := mustLocker(t, addrs, Options{Expiry: 300 * time.Millisecond, Metrics: m})
	key := uniqueKey(t)
	clients := redisClients(t, addrs)

	var cause error
	err := l.Do(context.Background(), key, func(ctx context.Context) error {
		for _, c := range clients {
			if err := c.Del(ctx, DefaultPrefix+key).Err(); err != nil {
				t.Errorf("delete lock key on %s: %v", c.Options().Addr, err)
			}
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(2 * time.Second):
			return errors.New("work context not cancelled after the lease was lost")
		}
	})

	if !errors.Is(cause, ErrLockLost) {
		t.Errorf("cause of the work's cancellation = %v, want ErrLockLost", cause)
	}
	if !errors.Is(err, ErrLockLost) {
		t.Errorf("Do = %v, want an error matching ErrLockLost", err)
	}
	// The client is told to send the request again, not that it failed.
	if p, ok := problem.As(err); !ok || p.Code != problem.Unavailable || p.RetryAfter <= 0 {
		t.Errorf("Do = %v, want a 503 unavailable with Retry-After", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want fn's own error (context.Canceled) kept in the chain", err)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "lost"); got != 1 {
		t.Errorf("lost = %v, want 1", got)
	}
	if got := metricValue(t, m, "shop_lock_extensions_total", "result", "failed"); got != 1 {
		t.Errorf("failed extensions = %v, want 1", got)
	}
	// Releasing a lost lock is expected to fail; it is not an unlock error.
	if got := metricValue(t, m, "shop_lock_unlock_errors_total"); got != 0 {
		t.Errorf("unlock errors = %v, want 0", got)
	}
}

// Work that ignores the cancellation and succeeds is not failed after the
// fact: what it wrote is guarded by the database layers.
func TestWatchdog_LostLockWorkSucceeds(t *testing.T) {
	addrs := testenv.RedisAddrs(t)
	l := mustLocker(t, addrs, Options{Expiry: 300 * time.Millisecond})
	key := uniqueKey(t)
	clients := redisClients(t, addrs)

	err := l.Do(context.Background(), key, func(ctx context.Context) error {
		for _, c := range clients {
			_ = c.Del(ctx, DefaultPrefix+key).Err()
		}
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Errorf("Do = %v, want nil: fn succeeded", err)
	}
}
