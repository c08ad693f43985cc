// Package jobs runs the background jobs that every replica runs (order
// expiry, payment reconciliation). Each job must be safe to run
// concurrently with its twins in other replicas; this package only paces
// it.
package jobs

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/shop-example/shop/internal/platform/tracing"
)

// Every calls run about every interval until ctx ends. Each wait is
// jittered between half and one and a half intervals, so replicas started
// together do not fire in lockstep. Each run is a trace of its own, a
// root span "job <name>" (with the provider tracing.WithProvider put in
// ctx); a job with no name makes none.
func Every(ctx context.Context, name string, interval time.Duration, run func(ctx context.Context)) {
	for {
		wait := interval/2 + rand.N(interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if name == "" {
			run(ctx)
			continue
		}
		runCtx, span := tracing.Start(ctx, "job "+name)
		run(runCtx)
		span.End()
	}
}
