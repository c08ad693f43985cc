package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/platform/jobs"
)

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int64
	done := make(chan struct{})
	go func() {
		jobs.Every(ctx, 10*time.Millisecond, func(context.Context) {
			if runs.Add(1) == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("ran %d times, want 3 (it stops once the context ends)", n)
	}
}
