package lock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/go-redsync/redsync/v4"
)

// Retry pacing of a waiter. Short first delays because most critical sections
// here are a database transaction of a few milliseconds; a cap of 50 ms so a
// waiter does not sleep long past the release; full jitter so waiters that
// collided once do not collide again. Sub-millisecond retries are avoided:
// on two cores, 32 waiters retrying every 0.5–2 ms on one key made about 64
// orders/s where the database alone made about 470: a retry storm that
// starves the holder.
const (
	firstDelay = 5 * time.Millisecond
	maxDelay   = 50 * time.Millisecond
	minSleep   = 1 * time.Millisecond
	growth     = 1.5
)

// maxUnreachable is how many attempts that reach no quorum, with no node
// reporting another holder, it takes to call the quorum unreachable. Two, not
// one, so a single dropped connection does not switch a request to degraded
// mode; not more, so a Redis outage costs a request milliseconds, not the
// whole wait budget.
const maxUnreachable = 2

// acquisition is how an acquisition ended when it did not return an error.
type acquisition struct {
	outcome string // outcomeAcquired, outcomeBusy or outcomeUnavailable
	cause   error  // the last redsync error, for the log
	tries   int    // attempts made (shop_lock_tries)
}

// acquire tries to take mu by repeated single attempts until it succeeds,
// the wait budget (which ends at deadline) or the Locker's tries are spent
// (busy), the quorum proves unreachable, or ctx ends (returned as the
// error, with the attempts made). It makes one attempt at least.
func (l *Locker) acquire(ctx context.Context, mu *redsync.Mutex, deadline time.Time) (acquisition, error) {
	delay := firstDelay
	unreachable, tries := 0, 0
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	// An attempt does not see the request's cancellation. Cancelling one
	// half-way would also cancel redsync's clean-up of the nodes it did
	// lock, leaving them locked until the lease expires. An attempt is
	// short (bounded by the per-node timeout); cancellation is checked
	// between attempts. (redsync would report it as ErrFailed anyway.)
	attemptCtx := context.WithoutCancel(ctx)
	for {
		tries++
		err := mu.TryLockContext(attemptCtx)
		if ctxErr := ctx.Err(); ctxErr != nil {
			if err == nil {
				// Won the lock for a caller that has gone: give it back.
				l.release(ctx, mu, false)
			}
			return acquisition{tries: tries}, ctxErr
		}
		if err == nil {
			return acquisition{outcome: outcomeAcquired, tries: tries}, nil
		}

		last := outcomeBusy
		if quorumUnreachable(err) {
			last = outcomeUnavailable
			if unreachable++; unreachable >= maxUnreachable {
				return acquisition{outcome: outcomeUnavailable, cause: err, tries: tries}, nil
			}
		}

		remaining := time.Until(deadline)
		if remaining <= 0 || l.maxTries > 0 && (tries >= l.maxTries || takenEverywhere(err, l.nodes)) {
			return acquisition{outcome: last, cause: err, tries: tries}, nil
		}
		sleep := min(jitter(delay), remaining)
		delay = min(time.Duration(float64(delay)*growth), maxDelay)

		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return acquisition{tries: tries}, ctx.Err()
		case <-timer.C:
		}
	}
}

// jitter returns a uniformly random sleep in [minSleep, d].
func jitter(d time.Duration) time.Duration {
	if d <= minSleep {
		return minSleep
	}
	return minSleep + rand.N(d-minSleep+1)
}

// takenEverywhere reports whether a failed attempt found the key taken on
// every one of the nodes: it took none, so the lock is held (or being
// fought over by others), and a waiter bounded by tries stops there. An
// attempt that took some nodes lost a split vote, or a race with the
// winner, and is worth another.
func takenEverywhere(err error, nodes int) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken) && len(taken.Nodes) == nodes
}

// quorumUnreachable reports whether a failed attempt failed only because
// nodes did not answer. Any node that answered "taken" means another holder
// exists, so the caller should wait like any other contender: running the
// work without the lock is for when nobody can lock, not for when someone
// else has. redsync joins one error per node, hence errors.As.
func quorumUnreachable(err error) bool {
	var (
		taken     *redsync.ErrTaken
		nodeTaken *redsync.ErrNodeTaken
		redisErr  *redsync.RedisError
	)
	if errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return false
	}
	return errors.As(err, &redisErr)
}

// answered is how many of the nodes answered the last failed attempt:
// those that said the key was taken, and those that granted it; the
// others did not answer. A success is every node's answer as far as
// redsync tells (it does not say which nodes granted it).
func answered(err error, nodes int) int {
	if err == nil {
		return nodes
	}
	var redisErr *redsync.RedisError
	silent := 0
	for _, e := range flatten(err) {
		if errors.As(e, &redisErr) {
			silent++
		}
	}
	return nodes - silent
}

// flatten lists the errors joined in err, one per node for redsync.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
