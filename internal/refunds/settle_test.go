package refunds_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/refunds"
)

// The ways the proxy in front of the gateway fails a refund.
const (
	passing = iota
	down    // answers 502 and passes nothing on: nothing was refunded
	losing  // passes the refund on, then answers 502: refunded, the answer lost
	pairing // holds a refund until a second one with its key comes (at most pairWait), then passes both on
)

// pairWait bounds how long the pairing proxy holds a refund for its pair.
const pairWait = 5 * time.Second

// proxy is the gateway behind a switch of how it fails refunds.
func (f *fixture) proxy(t *testing.T) (*atomic.Int32, string) {
	mode, _, url := f.pairingProxy(t)
	return mode, url
}

// pairingProxy is proxy, and how many refunds' keys met a second request
// while it was pairing: two settlers of one refund held at the processor
// together, each then settling what it read before the other wrote.
func (f *fixture) pairingProxy(t *testing.T) (*atomic.Int32, *atomic.Int32, string) {
	t.Helper()
	var mode, paired atomic.Int32
	var mu sync.Mutex
	waiting := map[string]chan struct{}{}
	met := map[string]bool{}
	pair := func(key string) {
		mu.Lock()
		if met[key] {
			mu.Unlock()
			return
		}
		if ch, ok := waiting[key]; ok {
			delete(waiting, key)
			met[key] = true
			paired.Add(1)
			close(ch)
			mu.Unlock()
			return
		}
		ch := make(chan struct{})
		waiting[key] = ch
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(pairWait):
			mu.Lock()
			if waiting[key] == ch {
				delete(waiting, key)
				met[key] = true // no pair came: the next one passes
			}
			mu.Unlock()
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/refunds" {
			f.gateway.Handler().ServeHTTP(w, req)
			return
		}
		switch mode.Load() {
		case down:
			http.Error(w, "gateway down", http.StatusBadGateway)
		case losing:
			f.gateway.Handler().ServeHTTP(httptest.NewRecorder(), req)
			http.Error(w, "answer lost", http.StatusBadGateway)
		case pairing:
			pair(req.Header.Get(gateway.HeaderIdempotencyKey))
			f.gateway.Handler().ServeHTTP(w, req)
		default:
			f.gateway.Handler().ServeHTTP(w, req)
		}
	}))
	t.Cleanup(srv.Close)
	return &mode, &paired, srv.URL
}

// A refund whose answer is lost stays processing (202 to the client),
// its amount held on the order so that no other refund can take it; the
// reconciler asks the processor again with the same key and records the
// refund it made: never a second one.
func TestRefund_LostAnswer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mode, url := f.proxy(t)
	svc := f.serviceOn(t, layers.Set{}, url, f.pool)
	user, o := f.mustPaidOrder(t)
	owner := orders.Refunder{UserID: user}
	ctx := context.Background()
	stockA := f.stock(t, "A")

	mode.Store(losing)
	r, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 2}}})
	if !errors.Is(err, refunds.ErrOutcomeUnknown) || r.Status != refunds.StatusProcessing {
		t.Fatalf("refund with its answer lost: %+v, %v; want processing, outcome unknown", r, err)
	}
	if got := f.order(t, o.ID); got.RefundedCents != 2*priceA || got.Items[0].Returned != 2 {
		t.Fatalf("order while the refund is in flight: %+v, want it holding the refund", got)
	}
	if _, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{AmountCents: priceB + 1}); problem.CodeOf(err) != problem.RefundExceedsRemaining {
		t.Fatalf("a refund of more than is not held: %v, want refund_exceeds_remaining", err)
	}
	if got := f.stock(t, "A"); got != stockA {
		t.Fatalf("stock of A %d while the refund is in flight, want %d", got, stockA)
	}

	mode.Store(passing)
	if n, err := svc.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("reconcile before the delay: %d, %v; want nothing due", n, err)
	}
	f.clock.Advance(2 * time.Minute)
	if n, err := svc.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("reconcile: %d, %v; want 1 settled", n, err)
	}
	got, err := refunds.NewStore(f.pool).Get(ctx, r.ID)
	if err != nil || got.Status != refunds.StatusSucceeded {
		t.Fatalf("refund after the reconciler: %+v, %v; want succeeded", got, err)
	}
	if n := len(f.gateway.Refunds(f.charge(t, o.ID).ID)); n != 1 {
		t.Fatalf("%d refunds at the processor, want 1", n)
	}
	if got := f.stock(t, "A"); got != stockA+2 {
		t.Errorf("stock of A %d, want %d: the returned units back once", got, stockA+2)
	}
	if r := f.books(t); !r.OK() || r.InFlight != 0 {
		t.Error(r)
	}
}

// A refund the processor refuses fails, and nothing of it stays: the
// order gets back what it held, and can be refunded again.
func TestRefund_ProcessorRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := f.service(t, layers.Set{})
	user, o := f.mustPaidOrder(t)
	ctx := context.Background()
	// The charge given back whole behind the shop's back.
	ch := f.charge(t, o.ID)
	if r := testenv.MustSend(t, http.MethodPost, f.gwURL+"/v1/refunds", "outside", fmt.Sprintf(`{"charge_id": %q}`, ch.ID)); r.Status != http.StatusCreated {
		t.Fatalf("refund at the gateway: %v", r)
	}
	r, err := svc.Refund(ctx, orders.Refunder{UserID: user}, newKey(), o.ID, refunds.Request{AmountCents: 700, Items: []inventory.Line{{SKU: "B", Quantity: 1}}})
	if problem.CodeOf(err) != problem.InvalidState || r.Status != refunds.StatusFailed || r.FailureReason == "" {
		t.Fatalf("refund the processor refused: %+v, %v; want failed, invalid_state", r, err)
	}
	if got := f.order(t, o.ID); got.RefundedCents != 0 || got.Items[1].Returned != 0 || got.Status != orders.StatusPaid {
		t.Fatalf("order after the refusal: %+v, want nothing held", got)
	}
	if n := f.mustInt(t, `SELECT count(*)::int FROM watermill_outbox WHERE payload->>'destination_topic' = $1`, outbox.OrderRefunded); n != 0 {
		t.Fatalf("%d order.refunded for a refund that failed", n)
	}
}

// TestRefund_FiveRoundTrips: a refund costs five round trips to
// PostgreSQL: three to begin (BEGIN with the claim, the lock and the
// reads; the order's write; the refund's insert with COMMIT) and two to
// settle (BEGIN with the refund's and the order's writes; COMMIT).
func TestRefund_FiveRoundTrips(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	trips := &testenv.RoundTrips{}
	traced := tracedPool(t, f.pool, trips)
	svc := f.serviceOn(t, layers.Set{}, f.gwURL, traced)
	ctx := context.Background()
	user, o := f.mustPaidOrder(t)
	owner := orders.Refunder{UserID: user}
	if _, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{AmountCents: 100}); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	trips.Reset()
	if _, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{AmountCents: 100, Items: []inventory.Line{{SKU: "A", Quantity: 1}}}); err != nil {
		t.Fatalf("refund: %v", err)
	}
	if n := trips.N(); n != 5 {
		t.Errorf("%d round trips for one refund, want 5", n)
	}
}

// The loser of a settle asks its own row first. Refunds whose answers
// were lost are settled by two reconcilers at once, each pass after pass,
// the processor holding each refund until both reconcilers have read it
// processing and asked: each refund is recorded once, its units' stock
// back once and its order.refunded written once. Without the refund's
// version check and outbox_one_per_event, the second settler records it
// again and returns the stock again.
func TestSettle_ReconcilersRace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		off    layers.Set
		breaks bool
	}{
		{"AllLayers", layers.Set{}, false},
		{"WithoutTheVersionAndTheConstraints", layers.Off(layers.Version, layers.Constraint), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 8
			f := newFixture(t)
			mode, paired, url := f.pairingProxy(t)
			var probe layers.Probe
			on := tc.off.Probed(&probe)
			svc := f.serviceOn(t, layers.Set{}, url, f.pool)
			ctx := context.Background()
			mode.Store(losing)
			for range n {
				user, o := f.mustPaidOrder(t)
				if _, err := svc.Refund(ctx, orders.Refunder{UserID: user}, newKey(), o.ID,
					refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 1}}}); !errors.Is(err, refunds.ErrOutcomeUnknown) {
					t.Fatalf("refund with its answer lost: %v", err)
				}
			}
			mode.Store(pairing)
			stockA := f.stock(t, "A")
			if tc.off.Takes(layers.Constraint) {
				f.mustExec(t, outbox.Constraints[0].Drop())
			}
			replicas := []*refunds.Service{f.serviceOn(t, on, url, f.pool), f.serviceOn(t, on, url, f.pool)}
			f.clock.Advance(2 * time.Minute)
			probe.Reset()
			testenv.Together(2*3, func(i int) {
				if _, err := replicas[i%2].Reconcile(ctx); err != nil {
					t.Errorf("reconcile: %v", err)
				}
			})
			returned := f.stock(t, "A") - stockA
			events := f.mustInt(t, `SELECT count(*)::int FROM watermill_outbox WHERE payload->>'destination_topic' = $1`, outbox.OrderRefunded)
			succeeded := f.mustInt(t, `SELECT count(*)::int FROM refunds WHERE status = 'succeeded'`)
			t.Logf("%d refunds succeeded; %d units of stock back, %d order.refunded; %d refunds asked by two settlers at once", succeeded, returned, events, paired.Load())
			if p := paired.Load(); p != n {
				t.Fatalf("%d of %d refunds were asked by two settlers at once: the race was not run", p, n)
			}
			if tc.breaks {
				if !probe.Asked(layers.Version) {
					t.Error("the version check was never taken off")
				}
				if returned <= n && events <= n {
					t.Fatalf("without the version check and the constraints: %d units back and %d events for %d refunds, want more", returned, events, n)
				}
				return
			}
			if succeeded != n || returned != n || events != n {
				t.Fatalf("%d succeeded, %d units back, %d events; want %d of each", succeeded, returned, events, n)
			}
			if r := f.books(t); !r.OK() || r.InFlight != 0 {
				t.Error(r)
			}
		})
	}
}
