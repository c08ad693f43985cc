//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// stopTimeout bounds `compose stop`: the replica drains its requests first.
const stopTimeout = 2 * time.Minute

// While buyers keep buying, paying and cancelling, one API replica and one
// Redis node are stopped. Clients retry what is retryable with the same
// key (bounded). Afterwards, through the API: every order the clients were
// answered exists once, none exists that they were not answered, each is in
// the state the client left it, each paid order has one succeeded payment,
// and the stock is the initial stock less what the orders hold.
func (sc *scenario) replicaAndRedisNodeDown(ctx context.Context, t *testing.T) {
	sc.underTraffic(ctx, t, "chaos", func(ctx context.Context) error {
		start := time.Now()
		if err := sc.s.stop(ctx, "api-2", "redis-3"); err != nil {
			return err
		}
		t.Logf("api-2 and redis-3 stopped in %s, under traffic", time.Since(start).Round(100*time.Millisecond))
		out, err := sc.s.run(ctx, "ps", "--services", "--filter", "status=running")
		if err != nil {
			return fmt.Errorf("compose ps: %w\n%s", err, out)
		}
		for _, svc := range []string{"api-2", "redis-3"} {
			if strings.Contains("\n"+out+"\n", "\n"+svc+"\n") {
				t.Errorf("%s still running after the stop", svc)
			}
		}
		return nil
	})
}

// The same traffic while api-1 is recreated, as a rollout replaces a
// replica: compose stops it (SIGTERM, its drain), removes it and starts a
// new one, here on key scheme 1 beside api-2 on scheme 2 in transition
// (the rollback of one replica from the mixed state, DESIGN.md §8); the
// balancer is reloaded to find the new container. The same checks
// afterwards, and the new api-1 answers through the balancer.
func (sc *scenario) replicaRecreated(ctx context.Context, t *testing.T) {
	sc.underTraffic(ctx, t, "rollout", func(ctx context.Context) error {
		start := time.Now()
		if out, err := sc.s.runWith(ctx, []string{"SHOP_KEY_SCHEME=1"}, "up", "-d", "--no-deps", "--force-recreate", "api-1"); err != nil {
			return fmt.Errorf("compose up --force-recreate api-1: %w\n%s", err, out)
		}
		// nginx resolves its upstreams when it loads its configuration.
		if out, err := sc.s.run(ctx, "exec", "-T", "lb", "nginx", "-s", "reload"); err != nil {
			return fmt.Errorf("reload the balancer: %w\n%s", err, out)
		}
		t.Logf("api-1 recreated on key scheme 1 in %s, under traffic", time.Since(start).Round(100*time.Millisecond))
		return nil
	})
	// Both replicas answer again, the new one among them.
	deadline := time.Now().Add(30 * time.Second)
	seen := map[string]bool{}
	for len(seen) < 2 && time.Now().Before(deadline) {
		resp, err := sc.c.once(ctx, request{method: http.MethodGet, path: "/v1/products/" + sc.bulk})
		if err == nil && resp.status == http.StatusOK {
			seen[resp.header.Get("X-Served-By")] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(seen) < 2 {
		t.Errorf("after the recreate only %v answered through the balancer, want both replicas", seen)
	}
}

// underTraffic runs buyers who keep buying, paying and cancelling while
// disrupt does its work, then checks what they were answered against what
// the API holds. disrupt starts once every buyer has placed two orders,
// and the buyers' last two orders wait until it has finished, so traffic
// runs before, during and after it.
func (sc *scenario) underTraffic(ctx context.Context, t *testing.T, prefix string, disrupt func(context.Context) error) {
	initial := getProduct(ctx, t, sc.c, sc.bulk).StockAvailable
	buyers := registerMany(ctx, t, sc.c, prefix, chaosBuyers)
	sc.noteBuyers(buyers)

	var warm sync.WaitGroup
	warm.Add(len(buyers))
	stopped := make(chan struct{})
	var stopErr error
	go func() {
		defer close(stopped)
		warm.Wait()
		stopCtx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		stopErr = disrupt(stopCtx)
	}()

	records := make([][]purchase, len(buyers))
	errs := forEach(len(buyers), len(buyers), func(i int) error {
		b := buyers[i]
		warmed := false
		defer func() {
			if !warmed {
				warm.Done()
			}
		}()
		for n := range chaosOrders {
			if n == chaosOrders-2 {
				<-stopped
			}
			p, err := sc.buyPayOrCancel(ctx, b, n)
			if err != nil {
				return err
			}
			records[i] = append(records[i], p)
			if n == 1 {
				warmed = true
				warm.Done()
			}
		}
		return nil
	})
	<-stopped
	if stopErr != nil {
		t.Fatal(stopErr)
	}
	failOn(t, errs)
	expect[map[string]any](ctx, t, sc.c, request{method: http.MethodGet, path: "/readyz"}, http.StatusOK)

	var mu sync.Mutex
	sold := map[string]int{}
	failOn(t, forEach(len(buyers), workers, func(i int) error {
		want := map[string]purchase{}
		for _, p := range records[i] {
			if _, dup := want[p.orderID]; dup {
				return fmt.Errorf("buyer %s: two keys answered with order %s", buyers[i].ID, p.orderID)
			}
			want[p.orderID] = p
		}
		mine := map[string]int{}
		if err := checkOrders(ctx, sc.c, buyers[i], want, mine); err != nil {
			return err
		}
		mu.Lock()
		sold[sc.bulk] += mine[sc.bulk]
		mu.Unlock()
		return nil
	}))
	if got := getProduct(ctx, t, sc.c, sc.bulk).StockAvailable; got != initial-sold[sc.bulk] {
		t.Errorf("stock %d, want initial %d - sold %d = %d", got, initial, sold[sc.bulk], initial-sold[sc.bulk])
	}
	// What the earlier steps did still holds.
	if got := getProduct(ctx, t, sc.c, sc.ltd).StockAvailable; got != 0 {
		t.Errorf("limited stock: %d, want 0", got)
	}
	failOn(t, forEach(len(sc.winners), workers, func(i int) error {
		w := sc.winners[i]
		return checkOrders(ctx, sc.c, w.buyer, map[string]purchase{w.orderID: w}, nil)
	}))
}

// buyPayOrCancel places the buyer's n-th order (1 to 3 units, its own key),
// then cancels it (every fourth) or pays it.
func (sc *scenario) buyPayOrCancel(ctx context.Context, b user, n int) (purchase, error) {
	p := purchase{buyer: b, key: fmt.Sprintf("buy-%s-%d", b.ID, n), quantity: 1 + n%3}
	resp, err := sc.c.do(ctx, request{method: http.MethodPost, path: "/v1/orders", token: b.Token, key: p.key,
		body: map[string]any{"items": []orderItem{{SKU: sc.bulk, Quantity: p.quantity}}}})
	if err != nil {
		return p, err
	}
	if resp.status != http.StatusCreated {
		return p, fmt.Errorf("order %s: %s", p.key, resp)
	}
	var o order
	if err := resp.decode(&o); err != nil {
		return p, err
	}
	p.orderID, p.status = o.ID, o.Status

	if n%4 == 3 {
		// Cancel takes no key: it is idempotent by meaning (a cancelled
		// order cancelled again answers 200, unchanged).
		resp, err := sc.c.do(ctx, request{method: http.MethodPost, path: "/v1/orders/" + o.ID + "/cancel", token: b.Token})
		if err != nil {
			return p, err
		}
		if resp.status != http.StatusOK {
			return p, errors.New("cancel " + o.ID + ": " + resp.String())
		}
		p.status = "cancelled"
		sc.noteCancelled(o.ID)
		return p, nil
	}
	paid, err := pay(ctx, sc.c, b, o.ID)
	if err != nil {
		return p, err
	}
	sc.notePaid(paid)
	p.status = "paid"
	return p, nil
}
