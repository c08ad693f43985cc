package jobs_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shop-example/shop/internal/platform/jobs"
)

// TestEvery runs the pacing on synctest's clock: a minute between runs
// costs no wall time, so each wait is checked against the jitter window
// exactly instead of waited for.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			interval = time.Minute
			runs     = 50
		)
		ctx, cancel := context.WithCancel(t.Context())
		var at []time.Time
		done := make(chan struct{})
		start := time.Now()
		go func() {
			jobs.Every(ctx, "", interval, func(context.Context) {
				if at = append(at, time.Now()); len(at) == runs {
					cancel()
				}
			})
			close(done)
		}()
		<-done

		if len(at) != runs {
			t.Fatalf("ran %d times, want %d (it stops once the context ends)", len(at), runs)
		}
		lo, hi := interval/2, interval/2+interval
		prev, distinct := start, map[time.Duration]bool{}
		for i, now := range at {
			wait := now.Sub(prev)
			if wait < lo || wait > hi {
				t.Errorf("run %d came %s after the previous one, want within [%s, %s]", i, wait, lo, hi)
			}
			distinct[wait] = true
			prev = now
		}
		// Replicas started together must not fire in lockstep.
		if len(distinct) < runs/2 {
			t.Errorf("%d distinct waits in %d runs, want them jittered", len(distinct), runs)
		}
	})
}

// TestEvery_StopsWhileWaiting: a context that ends during a wait ends
// Every at once, without one more run.
func TestEvery_StopsWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		ran := 0
		done := make(chan struct{})
		start := time.Now()
		go func() {
			jobs.Every(ctx, "", time.Hour, func(context.Context) { ran++ })
			close(done)
		}()
		time.Sleep(29 * time.Minute) // less than the shortest wait
		synctest.Wait()
		cancel()
		<-done
		if ran != 0 {
			t.Errorf("ran %d times before the shortest wait was over, want 0", ran)
		}
		if elapsed := time.Since(start); elapsed != 29*time.Minute {
			t.Errorf("Every returned after %s, want at once when its context ended (29m0s)", elapsed)
		}
	})
}
