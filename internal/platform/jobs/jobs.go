// Package jobs runs the background jobs that every replica runs (order
// expiry, payment reconciliation). Each job must be safe to run
// concurrently with its twins in other replicas; this package only paces
// it.
package jobs

import (
	"context"
	"math/rand/v2"
	"time"
)

// Every calls run about every interval until ctx ends. Each wait is
// jittered between half and one and a half intervals, so replicas started
// together do not fire in lockstep.
func Every(ctx context.Context, interval time.Duration, run func(ctx context.Context)) {
	for {
		wait := interval/2 + rand.N(interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		run(ctx)
	}
}
