//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/internal/platform/contract"
)

// The scenario's sizes: small enough for two cores, large enough to race.
const (
	flashStock   = 12 // units of the limited SKU
	flashBuyers  = 30 // distinct buyers of one unit each
	copiesPerKey = 3  // the same request, same key, sent at once
	bulkStock    = 500
	restock      = 100
	chaosBuyers  = 10
	chaosOrders  = 6 // per chaos buyer; every fourth is cancelled, the others paid
	workers      = 8 // concurrent clients where the scenario does not race on purpose
)

// TestStack runs the scenario on one stack, step by step; a step that fails
// stops the ones after it (they build on it), and the stack is torn down.
func TestStack(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := startStack(ctx, t)
	c, err := newClient(s.base, t)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{
		s:    s,
		c:    c,
		ltd:  "E2E-" + rand.Text()[:8] + "-LTD",
		bulk: "E2E-" + rand.Text()[:8] + "-BULK",
	}
	steps := []struct {
		name string
		run  func(context.Context, *testing.T)
	}{
		{"SeededCatalogue", sc.seededCatalogue},
		{"BalancerEdge", sc.balancerEdge},
		{"ProductsAndRestockOnce", sc.productsAndRestockOnce},
		{"FlashSaleWithDuplicateKeys", sc.flashSale},
		{"PayOnce", sc.payOnce},
		{"ReplicaRecreated", sc.replicaRecreated},
		{"ReplicaAndRedisNodeDown", sc.replicaAndRedisNodeDown},
		{"GatewayChargedOnce", sc.gatewayChargedOnce},
		{"BooksBalance", sc.booksBalance},
		{"MailedAndFulfilledOnce", sc.mailedAndFulfilledOnce},
	}
	for _, st := range steps {
		if !t.Run(st.name, func(t *testing.T) { st.run(contract.WithReporter(ctx, t), t) }) {
			return
		}
	}
	t.Logf("requests sent again: %s", sc.c.retrySummary())
}

// scenario is what the steps share.
type scenario struct {
	s         *stack
	c         *client
	ltd, bulk string // SKUs of this run: a limited one and a plentiful one
	winners   []purchase

	mu        sync.Mutex
	buyers    []user            // everyone who may have ordered
	paid      map[string]string // order id → the charge its payment recorded
	cancelled []string          // order ids
}

func (sc *scenario) noteBuyers(us []user) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.buyers = append(sc.buyers, us...)
}

// notePaid records that the client was told order id is paid by p.
func (sc *scenario) notePaid(p payment) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.paid == nil {
		sc.paid = map[string]string{}
	}
	if p.ChargeID != nil {
		sc.paid[p.OrderID] = *p.ChargeID
	} else {
		sc.paid[p.OrderID] = ""
	}
}

func (sc *scenario) noteCancelled(orderID string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.cancelled = append(sc.cancelled, orderID)
}

// purchase is an order as the client recorded it.
type purchase struct {
	buyer    user
	key      string
	orderID  string
	quantity int
	status   string // what the client made of it: pending_payment, paid, cancelled
}

func (sc *scenario) admin(method, path, key string, body any) request {
	return request{method: method, path: path, token: sc.s.adminToken, key: key, body: body}
}

// The migration job loaded the demo catalogue on the first start.
func (sc *scenario) seededCatalogue(ctx context.Context, t *testing.T) {
	if p := getProduct(ctx, t, sc.c, "SNEAKER-LTD"); p.StockAvailable <= 0 {
		t.Fatalf("seeded SNEAKER-LTD has stock %d", p.StockAvailable)
	}
}

// The admin creates this run's products, and one restock sent four times at
// once with one key is applied once.
func (sc *scenario) productsAndRestockOnce(ctx context.Context, t *testing.T) {
	for sku, stock := range map[string]int{sc.ltd: flashStock, sc.bulk: bulkStock} {
		expect[product](ctx, t, sc.c, sc.admin(http.MethodPost, "/v1/products", "",
			map[string]any{"sku": sku, "name": "e2e " + sku, "price_cents": 1000, "stock": stock}), http.StatusCreated)
	}
	key := "restock-" + sc.bulk
	errs := forEach(copiesPerKey+1, copiesPerKey+1, func(int) error {
		resp, err := sc.c.do(ctx, sc.admin(http.MethodPost, "/v1/products/"+sc.bulk+"/restock", key, map[string]int{"quantity": restock}))
		if err == nil && resp.status != http.StatusOK {
			err = fmt.Errorf("restock: %s", resp)
		}
		return err
	})
	failOn(t, errs)
	if got := getProduct(ctx, t, sc.c, sc.bulk).StockAvailable; got != bulkStock+restock {
		t.Fatalf("stock after one restock sent %d times: %d, want %d", copiesPerKey+1, got, bulkStock+restock)
	}
}

// Many distinct buyers race for a limited SKU, each sending its request
// several times at once with one key, across both replicas: exactly the
// stock is sold, one order per key, every copy gets the same answer.
func (sc *scenario) flashSale(ctx context.Context, t *testing.T) {
	buyers := registerMany(ctx, t, sc.c, "flash", flashBuyers)
	sc.noteBuyers(buyers)
	results := make([]purchase, len(buyers))
	errs := forEach(len(buyers), len(buyers), func(i int) error {
		b := buyers[i]
		key := "sale-" + b.ID
		answers := make([]response, copiesPerKey)
		copyErrs := forEach(copiesPerKey, copiesPerKey, func(j int) error {
			var err error
			answers[j], err = sc.c.do(ctx, request{method: http.MethodPost, path: "/v1/orders", token: b.Token, key: key,
				body: map[string]any{"items": []orderItem{{SKU: sc.ltd, Quantity: 1}}}})
			return err
		})
		if err := errors.Join(copyErrs...); err != nil {
			return err
		}
		first := answers[0]
		for _, a := range answers[1:] {
			if a.status != first.status || string(a.body) != string(first.body) {
				return fmt.Errorf("buyer %s, one key: answers differ: %s / %s", b.ID, first, a)
			}
		}
		switch {
		case first.status == http.StatusCreated:
			var o order
			if err := first.decode(&o); err != nil {
				return err
			}
			results[i] = purchase{buyer: b, key: key, orderID: o.ID, quantity: 1, status: o.Status}
		case first.status == http.StatusConflict && first.problem().Code == "out_of_stock":
			results[i] = purchase{buyer: b, key: key}
		default:
			return fmt.Errorf("buyer %s: %s", b.ID, first)
		}
		return nil
	})
	failOn(t, errs)

	for _, r := range results {
		if r.orderID != "" {
			sc.winners = append(sc.winners, r)
		}
	}
	if len(sc.winners) != flashStock {
		t.Errorf("%d buyers got an order for %d units", len(sc.winners), flashStock)
	}
	if got := getProduct(ctx, t, sc.c, sc.ltd).StockAvailable; got != 0 {
		t.Errorf("stock after the sale: %d, want 0", got)
	}
	// One order per key, seen from each buyer's own list.
	failOn(t, forEach(len(results), workers, func(i int) error {
		r := results[i]
		want := map[string]purchase{}
		if r.orderID != "" {
			want[r.orderID] = r
		}
		return checkOrders(ctx, sc.c, r.buyer, want, nil)
	}))
}

// Every winner pays, sending the payment twice at once with one key: one
// payment, the order paid, one succeeded payment in its list.
func (sc *scenario) payOnce(ctx context.Context, t *testing.T) {
	if len(sc.winners) == 0 {
		t.Fatal("no orders to pay")
	}
	failOn(t, forEach(len(sc.winners), workers, func(i int) error {
		w := &sc.winners[i]
		ids := make([]string, 2)
		copyErrs := forEach(2, 2, func(j int) error {
			p, err := pay(ctx, sc.c, w.buyer, w.orderID)
			ids[j] = p.ID
			if err == nil {
				sc.notePaid(p)
			}
			return err
		})
		if err := errors.Join(copyErrs...); err != nil {
			return err
		}
		if ids[0] != ids[1] {
			return fmt.Errorf("order %s, one key: two payments %s and %s", w.orderID, ids[0], ids[1])
		}
		w.status = "paid"
		return nil
	}))
	failOn(t, forEach(len(sc.winners), workers, func(i int) error {
		w := sc.winners[i]
		return checkOrders(ctx, sc.c, w.buyer, map[string]purchase{w.orderID: w}, nil)
	}))
}

// The gateway's own audit, read on its published port, agrees: every
// order the clients were told is paid has exactly one charge, the one its
// payment recorded; a cancelled order has none that was not refunded.
func (sc *scenario) gatewayChargedOnce(ctx context.Context, t *testing.T) {
	if len(sc.paid) == 0 {
		t.Fatal("no paid orders to check")
	}
	audit := func(orderID string) ([]charge, error) {
		var page struct {
			Items []charge `json:"items"`
		}
		resp, err := sc.c.do(ctx, request{method: http.MethodGet, base: sc.s.gateway, path: "/v1/charges?reference=" + orderID})
		if err == nil && resp.status != http.StatusOK {
			err = fmt.Errorf("gateway audit of %s: %s", orderID, resp)
		}
		if err == nil {
			err = resp.decode(&page)
		}
		return page.Items, err
	}
	for orderID, chargeID := range sc.paid {
		charges, err := audit(orderID)
		if err != nil {
			t.Fatal(err)
		}
		if len(charges) != 1 || charges[0].Status != "succeeded" || charges[0].ID != chargeID {
			t.Errorf("paid order %s: gateway audit %+v, want one succeeded charge %s", orderID, charges, chargeID)
		}
	}
	for _, orderID := range sc.cancelled {
		charges, err := audit(orderID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range charges {
			if c.Status != "refunded" {
				t.Errorf("cancelled order %s: charge %s is %s", orderID, c.ID, c.Status)
			}
		}
	}
	t.Logf("gateway audit: %d paid orders with one charge each, %d cancelled orders with none", len(sc.paid), len(sc.cancelled))
}

// pay pays the order with pm_card_ok, its key derived from the order, so
// every retry and every copy is the same request.
func pay(ctx context.Context, c *client, buyer user, orderID string) (payment, error) {
	var p payment
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/orders/" + orderID + "/payments",
		token: buyer.Token, key: "pay-" + orderID, body: map[string]string{"payment_method": "pm_card_ok"}})
	if err != nil {
		return p, err
	}
	if resp.status == http.StatusNotFound {
		return p, fmt.Errorf("pay order %s: %s (is POST /v1/orders/{id}/payments served?)", orderID, resp)
	}
	if resp.status != http.StatusCreated {
		return p, fmt.Errorf("pay order %s: %s", orderID, resp)
	}
	if err := resp.decode(&p); err != nil {
		return p, err
	}
	if p.Status != "succeeded" || p.OrderID != orderID {
		return p, fmt.Errorf("pay order %s: payment %+v", orderID, p)
	}
	return p, nil
}

// checkOrders compares a buyer's orders, read through the API, with what
// the client recorded: the same orders (none lost, none extra), each in the
// recorded status, with exactly one succeeded payment if it is paid and
// none otherwise. sold, if not nil, adds up the units of orders that hold
// stock, by SKU.
func checkOrders(ctx context.Context, c *client, buyer user, want map[string]purchase, sold map[string]int) error {
	got, err := listOrders(ctx, c, buyer.Token)
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("buyer %s: %d orders listed, %d recorded", buyer.ID, len(got), len(want))
	}
	for _, o := range got {
		w, ok := want[o.ID]
		switch {
		case !ok:
			return fmt.Errorf("buyer %s: order %s was never answered to the client", buyer.ID, o.ID)
		case o.Status != w.status && !(w.status == "paid" && o.Status == "fulfilled"):
			// A paid order is fulfilled once the fulfilment consumer
			// shipped it: the state the client left it, moved on.
			return fmt.Errorf("buyer %s: order %s is %s, want %s", buyer.ID, o.ID, o.Status, w.status)
		}
		n, err := succeededPayments(ctx, c, buyer.Token, o.ID)
		if err != nil {
			return err
		}
		if want := map[bool]int{true: 1, false: 0}[o.Status == "paid" || o.Status == "fulfilled"]; n != want {
			return fmt.Errorf("buyer %s: %s order %s has %d succeeded payments, want %d", buyer.ID, o.Status, o.ID, n, want)
		}
		if sold != nil && o.Status != "cancelled" && o.Status != "expired" {
			for _, it := range o.Items {
				sold[it.SKU] += it.Quantity
			}
		}
	}
	return nil
}

// registerMany registers n users, a few at a time.
func registerMany(ctx context.Context, t *testing.T, c *client, prefix string, n int) []user {
	t.Helper()
	users := make([]user, n)
	failOn(t, forEach(n, workers, func(i int) error {
		var err error
		users[i], err = register(ctx, c, fmt.Sprintf("%s-%d", prefix, i))
		return err
	}))
	return users
}

// forEach runs fn(0..n-1) on at most par goroutines and returns the errors.
func forEach(n, par int, fn func(i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errs
}

// failOn reports every error (at most ten) and stops the test if there was one.
func failOn(t *testing.T, errs []error) {
	t.Helper()
	var msgs []string
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		t.Fatalf("%d failed:\n%s", len(msgs), strings.Join(msgs[:min(len(msgs), 10)], "\n"))
	}
}

// The books audit (package books) over everything the run did, read the
// way a client and an auditor would: every buyer's orders and their
// payments through the API, every charge from the gateway's audit. A paid
// order has exactly one unrefunded charge, the one its payment records;
// an unpaid one has none; every charge is recorded on one payment.
func (sc *scenario) booksBalance(ctx context.Context, t *testing.T) {
	var orders []books.Order
	var payments []books.Payment
	for _, b := range sc.buyers {
		os, err := listOrders(ctx, sc.c, b.Token)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range os {
			orders = append(orders, books.Order{ID: o.ID, Status: o.Status})
			page := expect[struct {
				Items []payment `json:"items"`
			}](ctx, t, sc.c, request{method: http.MethodGet, path: "/v1/orders/" + o.ID + "/payments", token: b.Token}, http.StatusOK)
			for _, p := range page.Items {
				payments = append(payments, books.Payment{ID: p.ID, OrderID: p.OrderID, Status: p.Status,
					AmountCents: p.AmountCents, ChargeID: deref(p.ChargeID), RefundID: deref(p.RefundID)})
			}
		}
	}
	charges, err := books.FromGateway(ctx, nil, sc.s.gateway)
	if err != nil {
		t.Fatal(err)
	}
	r := books.Audit(orders, payments, charges)
	if !r.OK() || r.InFlight != 0 {
		t.Fatal(r)
	}
	t.Log(r)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
