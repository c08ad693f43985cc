package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// unlockTimeout bounds the release. The release runs after the work, on a
// context detached from the request: a client that hung up must not leave
// the lock held until its lease runs out.
const unlockTimeout = 2 * time.Second

// runHeld runs fn while mu is held and releases mu afterwards, also when fn
// panics (the release is deferred and the panic continues on its way).
func (l *Locker) runHeld(ctx context.Context, mu *redsync.Mutex, key string, fn func(ctx context.Context) error) (err error) {
	held := time.Now()
	ctx, span := tracing.Start(ctx, "lock.hold", attrKey.String(key))
	workCtx, cancel := context.WithCancelCause(ctx)
	stop := l.watch(ctx, mu, cancel)
	defer func() {
		// The watchdog goroutine is the only other user of mu; it must be
		// gone before mu is touched again.
		lost := stop()
		cancel(nil)
		l.m.hold.Observe(time.Since(held).Seconds())
		l.release(ctx, mu, lost)
		span.SetAttributes(attrLost.Bool(lost))
		tracing.End(span, err)
	}()

	err = fn(workCtx)
	if err != nil && errors.Is(context.Cause(workCtx), ErrLockLost) {
		// The work was stopped halfway, not refused: the client may send
		// the same request again (its key and the layers below make that
		// safe), so it is told to, as for any dependency that failed.
		return fmt.Errorf("%w: lock %s: %w: %w", &problem.Error{Code: problem.Unavailable, RetryAfter: unavailableRetryAfter,
			Detail: "the lock on this resource was lost while the request ran; send it again"}, key, ErrLockLost, err)
	}
	return err
}

// watch extends mu's lease every Expiry/3 until stop is called. An extension
// that fails cancels the work with cause ErrLockLost and ends the watchdog:
// the lease may already belong to someone else, so the work should stop
// before it does anything more under a lock it no longer has. stop waits for
// the watchdog to end and reports whether the lock was lost.
//
// A failed extension is not retried. Two thirds of the lease are still left
// when it happens, but a lease that cannot be confirmed is treated as gone;
// the database layers make the early stop safe.
func (l *Locker) watch(ctx context.Context, mu *redsync.Mutex, cancel context.CancelCauseFunc) (stop func() (lost bool)) {
	interval := l.expiry / 3
	// Extensions must not die with the request: a cancelled request is
	// still inside its critical section until fn returns.
	extendCtx := context.WithoutCancel(ctx)
	done := make(chan struct{})
	exited := make(chan bool, 1)

	go func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				exited <- false
				return
			case <-ticker.C:
			}
			tctx, tcancel := context.WithTimeout(extendCtx, interval)
			ok, err := mu.ExtendContext(tctx)
			tcancel()
			if ok && err == nil {
				l.m.extension(true)
				continue
			}
			if err == nil {
				err = redsync.ErrExtendFailed
			}
			l.m.extension(false)
			l.m.outcome(outcomeLost)
			l.log.WarnContext(ctx, "lock lost: lease extension failed; cancelling the work",
				"key", mu.Name(), "err", err)
			cancel(ErrLockLost)
			exited <- true
			return
		}
	}()

	return func() bool {
		close(done)
		return <-exited
	}
}

// release unlocks mu. A failed release does not undo work that committed: it
// is logged and counted, and the lease ends by expiry.
func (l *Locker) release(ctx context.Context, mu *redsync.Mutex, lost bool) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	ok, err := mu.UnlockContext(uctx)
	if ok {
		return
	}
	if lost {
		// Expected: the lease that could not be extended is usually gone
		// or someone else's. The release still ran to clear what is ours.
		l.log.DebugContext(ctx, "release of a lost lock", "key", mu.Name(), "err", err)
		return
	}
	l.m.unlockErrors.Inc()
	l.log.WarnContext(ctx, "lock release reached no quorum; the lease will expire",
		"key", mu.Name(), "err", err)
}
