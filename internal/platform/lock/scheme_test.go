package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/problem"
)

// mixed is replicas of two key schemes taking turns at one lock.
type mixed struct {
	lockers []*Locker
	next    atomic.Int64
}

func (m *mixed) Do(ctx context.Context, key string, fn func(context.Context) error) error {
	return m.lockers[m.next.Add(1)%int64(len(m.lockers))].Do(ctx, key, fn)
}

// Lockers of schemes 1 and 2 on one quorum exclude each other while the
// transition lasts (the scheme-2 one takes both names), and so do a
// scheme-2 one in transition and one after the clean-up. A scheme-1 and a
// clean scheme-2 locker, or one with the transition rules off, share no
// name: both get in at once.
func TestLocker_SchemesSideBySide(t *testing.T) {
	addrs := testenv.RedisAddrs(t)
	for _, tc := range []struct {
		name   string
		a, b   keyscheme.Scheme
		breaks bool
	}{
		{"1 beside 2+1", keyscheme.Scheme{Version: 1}, keyscheme.Scheme{Version: 2, Transition: true}, false},
		{"2+1 beside 2", keyscheme.Scheme{Version: 2, Transition: true}, keyscheme.Scheme{Version: 2}, false},
		{"1 beside 2", keyscheme.Scheme{Version: 1}, keyscheme.Scheme{Version: 2}, true},
		{"1 beside 2+1, rules off", keyscheme.Scheme{Version: 1}, keyscheme.Scheme{Version: 2, Transition: true, Blind: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{WaitBudget: 10 * time.Second}
			opts.Scheme = tc.a
			a := mustLocker(t, addrs, opts)
			opts.Scheme = tc.b
			b := mustLocker(t, addrs, opts)
			key := uniqueKey(t)
			const workers = 20
			counter, maxInside := raceIncrements(t, &mixed{lockers: []*Locker{a, b}}, key, workers)
			switch {
			case tc.breaks && maxInside < 2:
				t.Fatalf("max holders inside = %d, want two at once: the schemes share a name", maxInside)
			case !tc.breaks && (maxInside != 1 || counter != workers):
				t.Fatalf("max holders inside = %d, counter = %d; want 1 and %d", maxInside, counter, workers)
			}
			for _, name := range append(tc.a.LockNames(DefaultPrefix, key), tc.b.LockNames(DefaultPrefix, key)...) {
				assertReleased(t, addrs, name)
			}
		})
	}
}

// In transition a key's two names are taken within one wait budget: a
// waiter that got the scheme-1 name late has only what is left of it for
// the scheme-2 name, so the transition does not double the longest wait.
func TestLocker_SchemesShareTheWaitBudget(t *testing.T) {
	addrs := testenv.RedisAddrs(t)
	const budget = time.Second
	locker := func(s keyscheme.Scheme) *Locker { return mustLocker(t, addrs, Options{WaitBudget: budget, Scheme: s}) }
	inTransition := locker(keyscheme.Scheme{Version: 2, Transition: true})
	key := uniqueKey(t)
	releaseFirst := holdLock(t, locker(keyscheme.Scheme{Version: 1}), key) // the scheme-1 name, for most of the budget
	defer releaseFirst()
	releaseSecond := holdLock(t, locker(keyscheme.Scheme{Version: 2}), key) // the scheme-2 name, throughout
	defer releaseSecond()
	time.AfterFunc(budget*9/10, releaseFirst)

	start := time.Now()
	err := inTransition.Do(context.Background(), key, func(context.Context) error {
		t.Error("the work ran while the scheme-2 name was held")
		return nil
	})
	waited := time.Since(start)
	if problem.CodeOf(err) != problem.ResourceBusy {
		t.Fatalf("Do = %v, want resource_busy", err)
	}
	if waited > budget*3/2 {
		t.Errorf("waited %s for a budget of %s: each name had a budget of its own", waited.Round(time.Millisecond), budget)
	}
}
