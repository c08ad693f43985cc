package app_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/notify"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// eventVars make the relay and the consumers quick enough for a test: the
// jobs every 200 ms, a consumer's missing record redelivered after a second.
var eventVars = map[string]string{
	"SHOP_JOB_INTERVAL":           "200ms",
	"SHOP_OUTBOX_REDELIVER_AFTER": "1s",
	"SHOP_OUTBOX_RETENTION":       "1h",
}

// runEvents runs every replica's relay and consumers until the test ends.
func runEvents(t *testing.T, e *apptest.Env) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range e.Replicas {
		wg.Go(func() { r.App.RunEvents(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// paidOrders places n orders of one product and pays each with three
// copies of one request at once, over both replicas. It returns the
// orders the clients were told are paid.
func paidOrders(t *testing.T, e *apptest.Env, sku string, n int) []string {
	t.Helper()
	apptest.MustCreateProduct(t, e.R(0), sku, 700, n)
	u := apptest.MustCreateUser(t, e.R(0), "buyer-"+sku)
	var mu sync.Mutex
	var paid []string
	apptest.InParallel(n, 4, func(i int) {
		o := apptest.MustCreateOrder(t, e.R(i), u.Token, apptest.Line{SKU: sku, Quantity: 1})
		key := apptest.NewKey()
		var ok atomic.Bool
		var wg sync.WaitGroup
		for c := range 3 {
			wg.Go(func() {
				if res := payReq(t, e.R(i+c), u.Token, o.ID, gateway.MethodOK, key); res.Status == http.StatusCreated || res.Status == http.StatusOK {
					ok.Store(true)
				}
			})
		}
		wg.Wait()
		if !ok.Load() {
			// Every copy lost to another in flight: the key's answer now.
			apptest.WantStatus(t, payReq(t, e.R(i), u.Token, o.ID, gateway.MethodOK, key), http.StatusOK)
		}
		mu.Lock()
		paid = append(paid, o.ID)
		mu.Unlock()
	})
	return paid
}

// receipts counts the mailer's receipts of each order.
func receipts(m *mailer.Server, ids []string) (total, missing, extra int) {
	for _, id := range ids {
		n := 0
		for _, msg := range m.Messages(id) {
			if msg.Kind == notify.KindReceipt {
				n++
			}
		}
		total += n
		if n == 0 {
			missing++
		}
		if n > 1 {
			extra += n - 1
		}
	}
	return total, missing, extra
}

// waitFor polls cond until it holds or d has passed; it reports which.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestEvents_PaidOrdersMailedAndFulfilledOnce: every paid order gets one
// receipt at the provider and one fulfilment, every booking one ticket,
// however many copies of each pay request raced over two replicas, each
// running the relay and four consumers of each stream.
func TestEvents_PaidOrdersMailedAndFulfilledOnce(t *testing.T) {
	e := apptest.New(t, 2, eventVars)
	runEvents(t, e)
	paid := paidOrders(t, e, "EVT-ONCE", 12)

	u := apptest.MustCreateUser(t, e.R(0), "seat-buyer")
	ev := apptest.MustCreateEvent(t, e.R(0), "evening", 2, 5)
	hold := apptest.HoldSeats(t, e.R(0), u.Token, ev.ID, apptest.NewKey(), "A1", "A2")
	apptest.WantStatus(t, hold, http.StatusCreated)
	confirm := apptest.ConfirmHold(t, e.R(1), u.Token, apptest.Decode[apptest.SeatHold](t, hold).ID, apptest.NewKey())
	apptest.WantStatus(t, confirm, http.StatusCreated)
	booking := apptest.Decode[apptest.Booking](t, confirm).ID

	done := waitFor(30*time.Second, func() bool {
		_, missing, _ := receipts(e.Mailer, paid)
		return missing == 0 && len(e.Mailer.Messages(booking)) == 1 &&
			e.Count(t, `SELECT count(*) FROM fulfilments`) == len(paid)
	})
	total, missing, extra := receipts(e.Mailer, paid)
	t.Logf("%d paid orders: %d receipts (%d missing, %d extra), %d fulfilments, booking's mail %d",
		len(paid), total, missing, extra, e.Count(t, `SELECT count(*) FROM fulfilments`), len(e.Mailer.Messages(booking)))
	if !done || missing != 0 || extra != 0 {
		t.Errorf("receipts: %d missing, %d extra; want one per paid order", missing, extra)
	}
	if n := e.Count(t, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'fulfilled'`, paid); n != len(paid) {
		t.Errorf("%d of %d paid orders fulfilled", n, len(paid))
	}
	if msgs := e.Mailer.Messages(booking); len(msgs) != 1 || msgs[0].Kind != notify.KindTicket {
		t.Errorf("booking %s: mail %+v, want one ticket", booking, msgs)
	}
	// One event per fact, each in the outbox.
	if n := e.Count(t, `SELECT count(*) FROM watermill_outbox WHERE payload->>'destination_topic' = $1`, outbox.OrderPaid); n != len(paid) {
		t.Errorf("%d order.paid events, want %d", n, len(paid))
	}
	if n := e.Count(t, `SELECT count(*) FROM inbox WHERE consumer = $1`, notify.Consumer); n != len(paid)+1 {
		t.Errorf("mailer's inbox holds %d events, want %d", n, len(paid)+1)
	}
	e.AssertBooks(t)
}

// TestEvents_RedisLosesTheStreams: the relay published every event, then
// the streams were lost before any consumer read them (Redis restarted
// empty). Nothing is lost: the relay publishes again, from the outbox,
// what no consumer recorded.
func TestEvents_RedisLosesTheStreams(t *testing.T) {
	e := apptest.New(t, 2, eventVars)
	paid := paidOrders(t, e, "EVT-LOST", 8)

	// The relay alone, until every event is published.
	relay := e.R(0).App.Relay()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { relay.Run(ctx); close(stopped) }()
	if !waitFor(20*time.Second, func() bool {
		return e.Count(t, `SELECT count(*) FROM watermill_offsets_outbox WHERE offset_acked > 0`) == 1 && lagZero(t, relay)
	}) {
		t.Fatal("the relay did not publish the outbox")
	}
	cancel()
	<-stopped
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	defer rdb.Close()
	stream := relay.Prefix() + outbox.OrderPaid
	if n, err := rdb.XLen(context.Background(), stream).Result(); err != nil || n != int64(len(paid)) {
		t.Fatalf("stream %s holds %d (%v), want the %d events", stream, n, err, len(paid))
	}
	if err := rdb.Del(context.Background(), stream).Err(); err != nil {
		t.Fatal(err)
	}

	runEvents(t, e)
	done := waitFor(30*time.Second, func() bool {
		_, missing, _ := receipts(e.Mailer, paid)
		return missing == 0 && e.Count(t, `SELECT count(*) FROM fulfilments`) == len(paid)
	})
	total, missing, extra := receipts(e.Mailer, paid)
	redelivered := e.Count(t, `SELECT count(*) FROM outbox_redeliveries`)
	t.Logf("after the streams were lost: %d receipts (%d missing, %d extra), %d events redelivered", total, missing, extra, redelivered)
	if !done || missing != 0 || extra != 0 {
		t.Errorf("receipts: %d missing, %d extra; want one per paid order", missing, extra)
	}
	if redelivered < len(paid) {
		t.Errorf("%d events redelivered, want all %d the lost stream held", redelivered, len(paid))
	}
}

func lagZero(t *testing.T, r *outbox.Relay) bool {
	lag, err := r.Lag(context.Background())
	if err != nil {
		t.Fatalf("lag: %v", err)
	}
	return lag == 0
}
