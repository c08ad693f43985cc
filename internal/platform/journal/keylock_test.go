package journal_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/barrier"
	"github.com/shop-example/shop/internal/platform/journal"
)

func mustLock(t *testing.T, k *journal.KeyLocks, key string) (unlock func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	unlock, err := k.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock(%s): %v", key, err)
	}
	return unlock
}

// waitForHolders waits until n requests hold or wait for key's lock.
func waitForHolders(t *testing.T, k *journal.KeyLocks, key string, n int) {
	t.Helper()
	for k.Holders(key) < n {
		if t.Context().Err() != nil {
			t.Fatalf("never saw %d holders of %s", n, key)
		}
		runtime.Gosched()
	}
}

type locked struct {
	unlock func()
	err    error
}

func lockAsync(ctx context.Context, k *journal.KeyLocks, key string) <-chan locked {
	out := make(chan locked, 1)
	go func() {
		unlock, err := k.Lock(ctx, key)
		out <- locked{unlock, err}
	}()
	return out
}

// A second request with a key waits until the first frees it; the entry
// is dropped when nobody holds or waits for the key.
func TestKeyLocks_SameKeyWaits(t *testing.T) {
	var k journal.KeyLocks
	unlock := mustLock(t, &k, "k")
	second := lockAsync(t.Context(), &k, "k")
	waitForHolders(t, &k, "k", 2)
	select {
	case l := <-second:
		t.Fatalf("the second took the key (%v) while the first held it", l.err)
	default:
	}
	unlock()
	l := <-second
	if l.err != nil {
		t.Fatalf("the second after the first freed the key: %v", l.err)
	}
	l.unlock()
	if n := k.Holders("k"); n != 0 {
		t.Fatalf("%d holders after both freed the key, want 0", n)
	}
}

func TestKeyLocks_KeysRunInParallel(t *testing.T) {
	var k journal.KeyLocks
	unlock1 := mustLock(t, &k, "k1")
	unlock2 := mustLock(t, &k, "k2") // does not wait for k1
	unlock2()
	unlock1()
}

// A waiter whose request ends gives up at once and leaves the key as it
// found it.
func TestKeyLocks_WaiterGivesUpWithItsContext(t *testing.T) {
	var k journal.KeyLocks
	unlock := mustLock(t, &k, "k")
	ctx, hangUp := context.WithCancel(t.Context())
	waiter := lockAsync(ctx, &k, "k")
	waitForHolders(t, &k, "k", 2)
	hangUp()
	if l := <-waiter; !errors.Is(l.err, context.Canceled) || l.unlock != nil {
		t.Fatalf("the waiter that hung up: %v, want its own cancellation and no lock", l.err)
	}
	if n := k.Holders("k"); n != 1 {
		t.Fatalf("%d holders after the waiter gave up, want the first alone", n)
	}
	unlock()
	if n := k.Holders("k"); n != 0 {
		t.Fatalf("%d holders after the key was freed, want 0", n)
	}
}

// Twenty requests with one key, released at once: one at a time inside,
// and every one of them gets in.
func TestKeyLocks_OneHolderAtATime(t *testing.T) {
	var k journal.KeyLocks
	const n = 20
	var inside, most, done atomic.Int32
	barrier.Together(n, func(int) {
		unlock, err := k.Lock(context.Background(), "k")
		if err != nil {
			t.Errorf("Lock: %v", err)
			return
		}
		now := inside.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		runtime.Gosched()
		inside.Add(-1)
		done.Add(1)
		unlock()
	})
	if most.Load() != 1 || done.Load() != n {
		t.Fatalf("at most %d inside at once, %d got in; want 1 and %d", most.Load(), done.Load(), n)
	}
	if h := k.Holders("k"); h != 0 {
		t.Fatalf("%d holders at the end, want 0", h)
	}
}
