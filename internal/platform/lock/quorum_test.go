package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestLocker_QuorumUnreachable(t *testing.T) {
	deadNodes := []string{deadNode, "127.0.0.1:2", "127.0.0.1:3"}

	// In the key schemes' transition a key has two names; an unreachable
	// quorum is waited for once, not once for each.
	for _, scheme := range []keyscheme.Scheme{{Version: 1}, {Version: 2, Transition: true}} {
		t.Run("Degrade/scheme "+scheme.String(), func(t *testing.T) { degrades(t, deadNodes, scheme) })
	}

	t.Run("DegradeReturnsFnError", func(t *testing.T) {
		l := mustLocker(t, deadNodes, Options{})
		want := errors.New("from fn")
		if err := l.Do(context.Background(), uniqueKey(t), func(context.Context) error { return want }); !errors.Is(err, want) {
			t.Errorf("Do = %v, want fn's error", err)
		}
	})

	t.Run("Strict", func(t *testing.T) {
		m := metrics.New()
		l := mustLocker(t, deadNodes, Options{Mode: Strict, WaitBudget: 5 * time.Second, Metrics: m})

		err := l.Do(context.Background(), uniqueKey(t), func(context.Context) error {
			t.Error("fn ran in strict mode without the lock")
			return nil
		})
		p, ok := problem.As(err)
		if !ok || p.Code != problem.Unavailable {
			t.Fatalf("Do = %v, want a %s problem", err, problem.Unavailable)
		}
		if p.RetryAfter <= 0 {
			t.Errorf("RetryAfter = %v, want > 0", p.RetryAfter)
		}
		if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "unavailable"); got != 1 {
			t.Errorf("unavailable = %v, want 1", got)
		}
		if got := metricValue(t, m, "shop_lock_degraded_total"); got != 0 {
			t.Errorf("degraded = %v, want 0 in strict mode", got)
		}
	})

	t.Run("Ping", func(t *testing.T) {
		l := mustLocker(t, deadNodes, Options{Mode: Strict})
		want := Quorum{Answering: 0, Nodes: 3, Needed: 2, Mode: Strict}
		if q := l.Ping(context.Background()); q != want || q.Reachable() {
			t.Errorf("Ping with every node down = %+v (reachable %t), want %+v, unreachable", q, q.Reachable(), want)
		}
	})
}

// Two of three nodes are a quorum: the lock still excludes, in strict mode
// too, and nothing degrades.
func TestLocker_QuorumWithOneNodeDown(t *testing.T) {
	addrs := append(testenv.RedisAddrs(t)[:2], deadNode)
	m := metrics.New()
	l := mustLocker(t, addrs, Options{Mode: Strict, WaitBudget: 100 * time.Millisecond, Metrics: m})
	key := uniqueKey(t)

	if q := l.Ping(context.Background()); q.Answering != 2 || !q.Reachable() {
		t.Errorf("Ping with 2 of 3 nodes = %+v, want 2 answering, reachable", q)
	}
	release := holdLock(t, l, key)
	err := l.Do(context.Background(), key, func(context.Context) error {
		t.Error("second holder got in with one node down")
		return nil
	})
	if problem.CodeOf(err) != problem.ResourceBusy {
		t.Errorf("Do on a held key = %v, want %s", err, problem.ResourceBusy)
	}
	release()

	if err := l.Do(context.Background(), key, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after release = %v, want nil", err)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "acquired"); got != 2 {
		t.Errorf("acquired = %v, want 2", got)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "unavailable"); got != 0 {
		t.Errorf("unavailable = %v, want 0", got)
	}
}

func TestLocker_Ping(t *testing.T) {
	l := mustLocker(t, testenv.RedisAddrs(t), Options{})
	want := Quorum{Answering: 3, Nodes: 3, Needed: 2, Mode: Degrade}
	if q := l.Ping(context.Background()); q != want || !q.Reachable() {
		t.Errorf("Ping = %+v, want %+v, reachable", q, want)
	}
}

// A node that hangs (accepts, never answers) costs each lock at most the
// per-node timeout, not the wait budget, and the two live nodes still make
// the quorum: strict mode does not refuse.
func TestLocker_HungNode(t *testing.T) {
	addrs := append(testenv.RedisAddrs(t)[:2], blackholeNode(t))
	m := metrics.New()
	l := mustLocker(t, addrs, Options{Mode: Strict, Expiry: time.Second, WaitBudget: 10 * time.Second, Metrics: m})

	for range 2 {
		start := time.Now()
		if err := l.Do(context.Background(), uniqueKey(t), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Do with one hung node = %v, want nil", err)
		}
		// Loose: far below the 10s budget, far above the ~300 ms a lock
		// and release take while waiting out the hung node.
		if elapsed := time.Since(start); elapsed > 3*time.Second {
			t.Errorf("Do with one hung node took %v, want it bounded by the per-node timeouts", elapsed)
		}
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "acquired"); got != 2 {
		t.Errorf("acquired = %v, want 2", got)
	}
}

func degrades(t *testing.T, deadNodes []string, scheme keyscheme.Scheme) {
	m := metrics.New()
	l := mustLocker(t, deadNodes, Options{Mode: Degrade, WaitBudget: 5 * time.Second, Metrics: m, Scheme: scheme})

	start := time.Now()
	ran := false
	err := l.Do(context.Background(), uniqueKey(t), func(context.Context) error { ran = true; return nil })
	if err != nil {
		t.Fatalf("Do = %v, want nil (degraded: run without the lock)", err)
	}
	if !ran {
		t.Error("fn did not run in degrade mode")
	}
	// Bounded: a Redis outage must not cost every request the budget.
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("degraded after %v, want well under the 5s wait budget", elapsed)
	}
	if got := metricValue(t, m, "shop_lock_acquisitions_total", "outcome", "unavailable"); got != 1 {
		t.Errorf("unavailable = %v, want 1", got)
	}
	if got := metricValue(t, m, "shop_lock_degraded_total"); got != 1 {
		t.Errorf("degraded = %v, want 1", got)
	}
}
