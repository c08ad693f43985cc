package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestLocker_MutualExclusion(t *testing.T) {
	const workers = 20

	t.Run("WithoutLock", func(t *testing.T) {
		// The control: the same workload with layer 1 off shows the test
		// can see a broken lock.
		_, maxInside := raceIncrements(t, None{}, "k", workers)
		if maxInside < 2 {
			t.Errorf("max inside without a lock = %d, want overlap (the workload cannot detect a broken lock)", maxInside)
		}
	})

	t.Run("WithLock", func(t *testing.T) {
		addrs := testenv.RedisAddrs(t)
		m := metrics.New()
		l := mustLocker(t, addrs, Options{WaitBudget: 10 * time.Second, Metrics: m})
		key := uniqueKey(t)

		counter, maxInside := raceIncrements(t, l, key, workers)
		if counter != workers {
			t.Errorf("counter = %d, want %d (lost updates: two holders at once)", counter, workers)
		}
		if maxInside != 1 {
			t.Errorf("max holders inside the critical section = %d, want 1", maxInside)
		}
		if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "acquired"); got != workers {
			t.Errorf("acquired = %v, want %d", got, workers)
		}
		if got := metricValue(t, m, "shop_lock_wait_seconds"); got != workers {
			t.Errorf("wait observations = %v, want %d", got, workers)
		}
		if got := metricValue(t, m, "shop_lock_degraded_total"); got != 0 {
			t.Errorf("degraded = %v, want 0", got)
		}
		// Failed attempts clean up after themselves: no node keeps a
		// stray key that would block the next caller until it expires.
		assertReleased(t, addrs, DefaultPrefix+key)
	})
}

// raceIncrements has n goroutines increment a counter under locker's lock on
// key and returns the final count and the most goroutines seen inside the
// critical section at once.
//
// The increment is a read, a pause and a write, each atomic on its own so
// the race detector (which cannot see a lock held in Redis) stays quiet,
// while two overlapping holders still lose an update.
func raceIncrements(t *testing.T, locker interface {
	Do(context.Context, string, func(context.Context) error) error
}, key string, n int) (counter, maxInside int64) {
	t.Helper()
	var count, inside, most atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := locker.Do(context.Background(), key, func(ctx context.Context) error {
				now := inside.Add(1)
				defer inside.Add(-1)
				for {
					if cur := most.Load(); now <= cur || most.CompareAndSwap(cur, now) {
						break
					}
				}
				v := count.Load()
				time.Sleep(2 * time.Millisecond)
				count.Store(v + 1)
				return nil
			})
			if err != nil {
				t.Errorf("Do: %v", err)
			}
		})
	}
	wg.Wait()
	return count.Load(), most.Load()
}

func TestLocker_BusyAfterWaitBudget(t *testing.T) {
	m := metrics.New()
	const budget = 200 * time.Millisecond
	l := mustLocker(t, testenv.RedisAddrs(t), Options{WaitBudget: budget, Metrics: m})
	key := uniqueKey(t)
	release := holdLock(t, l, key)
	defer release()

	start := time.Now()
	ran := false
	err := l.Do(context.Background(), key, func(context.Context) error { ran = true; return nil })
	elapsed := time.Since(start)

	p, ok := problem.As(err)
	if !ok || p.Code != problem.ResourceBusy {
		t.Fatalf("Do on a held key = %v, want a %s problem", err, problem.ResourceBusy)
	}
	if p.RetryAfter <= 0 {
		t.Errorf("RetryAfter = %v, want > 0", p.RetryAfter)
	}
	if ran {
		t.Error("fn ran although the lock was held by another")
	}
	if elapsed < budget*3/4 {
		t.Errorf("gave up after %v, want about the wait budget %v", elapsed, budget)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "busy"); got != 1 {
		t.Errorf("busy = %v, want 1", got)
	}
}

func TestLocker_ContextCancelledWhileWaiting(t *testing.T) {
	l := mustLocker(t, testenv.RedisAddrs(t), Options{WaitBudget: 10 * time.Second})
	key := uniqueKey(t)
	release := holdLock(t, l, key)
	defer release()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := l.Do(ctx, key, func(context.Context) error {
		t.Error("fn ran although the lock was held by another")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with an expiring context = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("returned after %v, want soon after the context ended", elapsed)
	}

	// A context that is already done never reaches Redis.
	done, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if err := l.Do(done, uniqueKey(t), func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestLocker_PanicReleasesLock(t *testing.T) {
	addrs := testenv.RedisAddrs(t)
	l := mustLocker(t, addrs, Options{WaitBudget: 100 * time.Millisecond})
	key := uniqueKey(t)

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic of fn to reach the caller", r)
			}
		}()
		_ = l.Do(context.Background(), key, func(context.Context) error { panic("boom") })
	}()

	assertReleased(t, addrs, DefaultPrefix+key)
	if err := l.Do(context.Background(), key, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after a panicking holder = %v, want the lock free", err)
	}
}

func TestLocker_ReleasesAfterRequestCancelled(t *testing.T) {
	addrs := testenv.RedisAddrs(t)
	l := mustLocker(t, addrs, Options{})
	key := uniqueKey(t)

	// The client hangs up while the work runs; the work finishes and the
	// release must not be skipped because the request's context is done.
	ctx, cancel := context.WithCancel(context.Background())
	err := l.Do(ctx, key, func(ctx context.Context) error {
		cancel()
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil (fn succeeded)", err)
	}
	assertReleased(t, addrs, DefaultPrefix+key)
}

func TestLocker_SingleNode(t *testing.T) {
	addrs := testenv.RedisAddrs(t)[:1]
	l := mustLocker(t, addrs, Options{WaitBudget: 100 * time.Millisecond})
	key := uniqueKey(t)
	release := holdLock(t, l, key)

	err := l.Do(context.Background(), key, func(context.Context) error { return nil })
	if problem.CodeOf(err) != problem.ResourceBusy {
		t.Errorf("Do on a held key = %v, want %s", err, problem.ResourceBusy)
	}
	release()
	if err := l.Do(context.Background(), key, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after release = %v, want nil", err)
	}
}

func TestNone(t *testing.T) {
	want := errors.New("from fn")
	if err := (None{}).Do(context.Background(), "k", func(context.Context) error { return want }); err != want {
		t.Errorf("None.Do = %v, want fn's error", err)
	}
}

// A Locker with tries gives up on a held lock at its first attempt, which
// finds the key taken on every node, where one with the same budget and
// no tries keeps trying for the whole budget: shop_lock_tries shows the
// difference.
func TestLocker_WithTries(t *testing.T) {
	m := metrics.New()
	const budget = 500 * time.Millisecond
	waiting := mustLocker(t, testenv.RedisAddrs(t), Options{WaitBudget: budget, Metrics: m})
	few, err := waiting.WithTries(3)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	release := holdLock(t, waiting, key)
	defer release()

	triesBefore := histogramSum(t, m, "shop_lock_tries")
	start := time.Now()
	err = few.Do(context.Background(), key, func(context.Context) error { return nil })
	elapsed := time.Since(start)
	if problem.CodeOf(err) != problem.ResourceBusy {
		t.Fatalf("Do with 3 tries on a held key = %v, want %s", err, problem.ResourceBusy)
	}
	if elapsed > budget/2 {
		t.Errorf("gave up after %v, want well within the %v budget: one try is a few milliseconds", elapsed, budget)
	}
	if got := histogramSum(t, m, "shop_lock_tries") - triesBefore; got != 1 {
		t.Errorf("shop_lock_tries grew by %v, want 1: the key was taken on every node", got)
	}

	triesBefore = histogramSum(t, m, "shop_lock_tries")
	err = waiting.Do(context.Background(), key, func(context.Context) error { return nil })
	if problem.CodeOf(err) != problem.ResourceBusy {
		t.Fatalf("Do without tries on a held key = %v, want %s", err, problem.ResourceBusy)
	}
	spun := histogramSum(t, m, "shop_lock_tries") - triesBefore
	if spun <= 3 {
		t.Errorf("the waiter without tries made %v attempts in %v, want many more than 3", spun, budget)
	}
	t.Logf("on a held lock: 1 try in %v with WithTries(3); %v tries in the %v budget without", elapsed, spun, budget)

	for _, bad := range []int{0, -1} {
		if _, err := waiting.WithTries(bad); err == nil {
			t.Errorf("WithTries(%d) = nil error, want a refusal", bad)
		}
	}
}

// Contenders that ask at once with a few tries each: one of them takes
// the lock (the tries past the first get past a split vote), the others
// are told busy, and none made more attempts than its tries.
func TestLocker_WithTriesOneOfManyWins(t *testing.T) {
	m := metrics.New()
	l, err := mustLocker(t, testenv.RedisAddrs(t), Options{Metrics: m}).WithTries(3)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	const contenders = 16
	var ran, busy atomic.Int64
	testenv.Together(contenders, func(int) {
		err := l.Do(context.Background(), key, func(context.Context) error {
			ran.Add(1)
			time.Sleep(100 * time.Millisecond) // held past every other's tries
			return nil
		})
		switch {
		case err == nil:
		case problem.CodeOf(err) == problem.ResourceBusy:
			busy.Add(1)
		default:
			t.Errorf("Do: %v", err)
		}
	})
	if ran.Load() != 1 || busy.Load() != contenders-1 {
		t.Errorf("%d ran, %d busy; want 1 and %d", ran.Load(), busy.Load(), contenders-1)
	}
	if most := histogramMax(t, m, "shop_lock_tries"); most > 3 {
		t.Errorf("an acquisition made up to %v attempts, want at most 3", most)
	}
}
