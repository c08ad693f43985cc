package layers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// Locker runs work under a distributed lock: lock.Locker over the Redis
// nodes, or lock.None for a test that takes no lock.
//
// A lock that stays taken answers resource_busy without running fn. A
// lease lost while fn runs cancels fn's context, and the lock answers
// 503 with Retry-After (lock.ErrLockLost in the chain): the work was
// stopped halfway, not refused, and the same request is safe to send
// again. That is the one translation of a lost lock; a flow adds none.
type Locker interface {
	Do(ctx context.Context, key string, fn func(ctx context.Context) error) error
}

// MaxTries bounds the tries of a write that loses a race at layer 3 or 4
// (Flow.Retry): contention never becomes an unbounded loop.
const MaxTries = 3

// Flow is the skeleton every flow runs on: its name, its lock and its
// count of the conflicts each layer stopped. A service holds one per flow
// (create_order, cancel_order, …), all on the same Locker.
type Flow struct {
	// Name is the "flow" label of shop_conflicts_stopped_total, and the
	// flow's name in docs/ABLATION.md.
	Name string
	// Noun is what the flow writes, as its answers name it: "order",
	// "hold", "like".
	Noun    string
	Locker  Locker
	Metrics *metrics.Metrics // nil counts nothing
}

// Flows makes a service's flows, each by its name, all of them writing
// noun under the same lock and counter.
func Flows(noun string, locker Locker, m *metrics.Metrics) func(name string) Flow {
	return func(name string) Flow {
		return Flow{Name: name, Noun: noun, Locker: locker, Metrics: m}
	}
}

// Stopped counts a conflict that layer l stopped, and names the layer on
// ctx's span and its request's (shop.layer).
func (f Flow) Stopped(ctx context.Context, l Layer) {
	f.Metrics.Stopped(f.Name, l.String())
	tracing.Stopped(ctx, l.String())
}

// Lock runs fn under the lock on key. See LockAll.
func (f Flow) Lock(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return f.LockAll(ctx, []string{key}, fn)
}

// LockAll runs fn under the locks on keys, each taken inside the one
// before (in the order given, released in reverse). With no keys it runs
// fn as it is: the flow's lock is in its transaction, or this request
// needs none.
//
// A lock that stays taken answers resource_busy without running fn; it
// is counted as a conflict that layer 1 stopped.
func (f Flow) LockAll(ctx context.Context, keys []string, fn func(ctx context.Context) error) error {
	if len(keys) == 0 {
		return fn(ctx)
	}
	ran := false
	err := f.nest(ctx, keys, func(ctx context.Context) error {
		ran = true
		return fn(ctx)
	})
	if !ran && problem.CodeOf(err) == problem.ResourceBusy {
		f.Stopped(ctx, Lock)
	}
	return err
}

func (f Flow) nest(ctx context.Context, keys []string, fn func(ctx context.Context) error) error {
	if len(keys) == 0 {
		return fn(ctx)
	}
	return f.Locker.Do(ctx, keys[0], func(ctx context.Context) error {
		return f.nest(ctx, keys[1:], fn)
	})
}

// Retry runs try, and runs it again while it loses a race (returns an
// error made by Lost or Again), at most MaxTries times. Each race lost at
// a layer is counted under that layer. When the last try loses too, the
// request is answered resource_busy, "the <noun> keeps changing; try
// again", with Retry-After.
//
// try is given its number, from 1: a try can read again what the one
// before it read (attempt > 1), or end its last one (attempt ==
// MaxTries) with an answer of its own instead of resource_busy.
//
// Each race lost is an event "retry" on ctx's span, naming its layer.
func (f Flow) Retry(ctx context.Context, try func(attempt int) error) error {
	for attempt := 1; ; attempt++ {
		err := try(attempt)
		var race *Race
		if !errors.As(err, &race) {
			return err
		}
		tracing.Event(ctx, "retry", attribute.Int("shop.attempt", attempt), tracing.AttrLayer.String(race.Layer.String()))
		if race.counted {
			f.Stopped(ctx, race.Layer)
		}
		if attempt >= MaxTries {
			return f.KeepsChanging()
		}
	}
}

// KeepsChanging is the answer to a request that lost every try: the
// rows it writes changed under each of them.
func (f Flow) KeepsChanging() error {
	return &problem.Error{Code: problem.ResourceBusy, RetryAfter: time.Second,
		Detail: fmt.Sprintf("the %s keeps changing; try again", f.Noun)}
}

// Race is a write that lost a race: the row it read moved before it was
// written (layer 3), or a constraint refused what the read allowed
// (layer 4). Nothing was written; reading again decides.
type Race struct {
	Layer   Layer
	Err     error
	counted bool
}

func (r *Race) Error() string { return r.Layer.String() + ": " + r.Err.Error() }
func (r *Race) Unwrap() error { return r.Err }

// Lost marks err as a race lost at layer l, for Flow.Retry.
func Lost(l Layer, err error) error { return &Race{Layer: l, Err: err, counted: true} }

// Again marks err as a try the database rolled back without a layer
// refusing it (a deadlock it broke), to be run again, uncounted.
func Again(err error) error { return &Race{Err: err} }
