//go:build faults

package faults

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/testenv"
)

// payerStock is the pay storm's SKU's stock: it never runs out. The flash
// sale's (size.flashStock) is sized to run out late in a scenario.
const payerStock = 1_000_000

// setUp registers users, the two SKUs and the hot posts, straight in the
// database or through the admin API of a replica.
func setUp(t *testing.T, c *cluster, users, posts, flashStock int) *workload {
	t.Helper()
	us := testenv.Users(t, c.db, users)
	w := &workload{flashSKU: "SKU-FLASH", payerSKU: "SKU-PAYER", flashStock: flashStock}
	for _, u := range us {
		w.tokens = append(w.tokens, u.Token)
	}
	h := &history{}
	cl := newClient(func() []string { return []string{c.replicas[0].url} }, h)
	ctx := context.Background()
	for sku, stock := range map[string]int{w.flashSKU: flashStock, w.payerSKU: payerStock} {
		r := cl.do(ctx, "setup", "POST", "/v1/products", adminToken, "",
			map[string]any{"sku": sku, "name": sku, "price_cents": 1500, "stock": stock})
		if r.status != http.StatusCreated {
			t.Fatalf("create product %s: %d %s", sku, r.status, r.body)
		}
	}
	for i := range posts {
		r := cl.do(ctx, "setup", "POST", "/v1/posts", w.tokens[0], "", map[string]string{"title": fmt.Sprintf("hot post %d", i)})
		var p struct {
			ID string `json:"id"`
		}
		if r.status != http.StatusCreated || json.Unmarshal(r.body, &p) != nil {
			t.Fatalf("create post: %d %s", r.status, r.body)
		}
		w.posts = append(w.posts, p.ID)
	}
	w.stocked = map[string]int{w.flashSKU: flashStock, w.payerSKU: payerStock}
	return w
}

// newHall creates the seat rush's hall for a scenario.
func newHall(t *testing.T, c *cluster, w *workload) {
	t.Helper()
	cl := newClient(func() []string { return []string{c.replicas[0].url} }, &history{})
	r := cl.do(context.Background(), "setup", "POST", "/v1/events", adminToken, "",
		map[string]any{"name": "fault hall", "rows": hallRows, "seats_per_row": hallSeatsPerRow})
	var e struct {
		ID string `json:"id"`
	}
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &e) != nil {
		t.Fatalf("create event: %d %s", r.status, r.body)
	}
	w.event, w.seats = e.ID, newSeatLog()
}

// restockFlash puts the flash sale's stock back to its size, so every
// scenario's fault meets a sale that is still selling.
func restockFlash(t *testing.T, c *cluster, w *workload) {
	t.Helper()
	ctx := context.Background()
	var stock int
	if err := c.db.QueryRow(ctx, `SELECT stock_available FROM products WHERE sku = $1`, w.flashSKU).Scan(&stock); err != nil {
		t.Fatalf("read stock: %v", err)
	}
	if stock >= w.flashStock {
		return
	}
	cl := newClient(func() []string { return []string{c.replicas[0].url} }, &history{})
	r := cl.do(ctx, "setup", "POST", "/v1/products/"+w.flashSKU+"/restock", adminToken, crand.Text(),
		map[string]int{"quantity": w.flashStock - stock})
	if r.status != http.StatusOK {
		t.Fatalf("restock: %d %s", r.status, r.body)
	}
	w.stocked[w.flashSKU] += w.flashStock - stock
}

// audit is what the invariants found after a scenario, once settled.
type audit struct {
	problems []string
	books    books.Report
	sold     map[string]int
	stocked  int // the flash sale's stock over the run
	tickets  int // seats booked over the run
	liked    int
	stuck    int // payments still processing after the settle wait
	// stuckRefunds are refunds still processing after it: the reconcilers
	// did not settle them within the run.
	stuckRefunds int
	// Acknowledged writes not found: orders answered 201, orders whose
	// payment was answered 201 and are not paid, bookings answered 201,
	// refunds answered 201 or 202 not there (or answered 201 and not
	// succeeded).
	lostOrders, lostPaid, lostBookings, lostRefunds int
	// ackRefunds and ackProcessing are the refunds the run acknowledged:
	// answered 201, and answered only 202 (processing).
	ackRefunds, ackProcessing int
}

// lost is every acknowledged write the audit did not find.
func (a audit) lost() int { return a.lostOrders + a.lostPaid + a.lostBookings + a.lostRefunds }

// quiet is how long the shop's tables must stay unchanged before an
// audit: longer than a request can wait for its lock (lock.DefaultWaitBudget,
// 2 s), because a pay request the client gave up on still runs on its
// replica, and may only now begin its payment.
const quiet = 2500 * time.Millisecond

// settle waits until no payment and no refund is processing (the
// reconcilers finish what the fault left in flight) and nothing has
// changed for quiet, at most wait. It returns the payments and the
// refunds still processing. "Nothing" is the tables and the consumers'
// effects (readEvents) alike; settle leaves its last reading of the
// effects, and since when it had not changed, in c.settled, so that the
// events audit after it does not wait again for what it already saw stay
// still.
func settle(c *cluster, wait time.Duration) (payments, refunds int) {
	deadline := time.Now().Add(wait)
	var last, lastEvents string
	lastChange := time.Now()
	defer func() { c.settled = settledEvents{summary: lastEvents, since: lastChange} }()
	for {
		var state string
		events, err := readEvents(c)
		if err != nil {
			events.otherMails = -1 // a reading that failed matches no other
		}
		if sum := events.summary(); sum != lastEvents {
			lastEvents, lastChange = sum, time.Now()
		}
		if err := c.db.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM payments WHERE status = 'processing'),
			(SELECT count(*) FROM refunds WHERE status = 'processing'),
			(SELECT count(*) || '/' || coalesce(max(updated_at)::text, '') FROM payments) || '/' ||
			(SELECT count(*) || '/' || coalesce(max(updated_at)::text, '') FROM orders) || '/' ||
			(SELECT count(*) || '/' || coalesce(max(updated_at)::text, '') FROM refunds) || '/' ||
			(SELECT count(*) || '/' || coalesce(max(updated_at)::text, '') FROM likes)`).Scan(&payments, &refunds, &state); err != nil {
			payments, refunds = -1, -1
		}
		if state != last {
			last, lastChange = state, time.Now()
		}
		if (payments == 0 && refunds == 0 && time.Since(lastChange) >= quiet) || time.Now().After(deadline) {
			return payments, refunds
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// check runs every audit on the database and the gateway.
func check(t *testing.T, c *cluster, w *workload, h *history) audit {
	t.Helper()
	ctx := context.Background()
	a := audit{sold: map[string]int{}}
	a.stuck, a.stuckRefunds = settle(c, 30*time.Second)
	if a.stuck != 0 {
		a.problems = append(a.problems, fmt.Sprintf("%d payments still processing 30 s after the run", a.stuck))
	}
	if a.stuckRefunds != 0 {
		a.problems = append(a.problems, fmt.Sprintf("%d refunds still processing 30 s after the run: the reconcilers did not settle them", a.stuckRefunds))
	}
	problem := func(format string, args ...any) { a.problems = append(a.problems, fmt.Sprintf(format, args...)) }

	// Orders vs stock: what left the shelf is what the live orders hold,
	// less the units their refunds gave back.
	for sku, initial := range w.stocked {
		var stock, held int
		if err := c.db.QueryRow(ctx, `SELECT stock_available FROM products WHERE sku = $1`, sku).Scan(&stock); err != nil {
			t.Fatalf("read stock: %v", err)
		}
		if err := c.db.QueryRow(ctx, `SELECT coalesce(sum(i.quantity - i.returned), 0)::int FROM order_items i
			WHERE i.sku = $1 AND NOT EXISTS (SELECT 1 FROM stock_releases r WHERE r.order_id = i.order_id)`, sku).Scan(&held); err != nil {
			t.Fatalf("read orders: %v", err)
		}
		a.sold[sku] = initial - stock
		if sku == w.flashSKU {
			a.stocked = initial
		}
		if stock < 0 || initial-stock != held {
			problem("%s: stock %d of %d, but live orders hold %d", sku, stock, initial, held)
		}
	}
	var badReleases int
	if err := c.db.QueryRow(ctx, `SELECT count(*)::int FROM orders o
		WHERE (o.status IN ('cancelled', 'expired')) <> EXISTS (SELECT 1 FROM stock_releases r WHERE r.order_id = o.id)`).Scan(&badReleases); err != nil {
		t.Fatalf("read releases: %v", err)
	}
	if badReleases != 0 {
		problem("%d orders whose status disagrees with their stock release", badReleases)
	}

	// Acknowledged writes were not lost.
	h.mu.Lock()
	ackOrders, ackPaid := append([]string(nil), h.ackOrders...), append([]string(nil), h.ackPaid...)
	h.mu.Unlock()
	var missing, unpaid int
	if err := c.db.QueryRow(ctx, `SELECT count(*)::int FROM unnest($1::uuid[]) AS a(id)
		WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = a.id)`, ackOrders).Scan(&missing); err != nil {
		t.Fatalf("read acknowledged orders: %v", err)
	}
	if err := c.db.QueryRow(ctx, `SELECT count(*)::int FROM unnest($1::uuid[]) AS a(id)
		WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = a.id AND o.status IN ('paid', 'fulfilled', 'refunded'))`, ackPaid).Scan(&unpaid); err != nil {
		t.Fatalf("read acknowledged payments: %v", err)
	}
	a.lostOrders, a.lostPaid = missing, unpaid
	if missing != 0 {
		problem("%d orders answered 201 are not in the database", missing)
	}
	if unpaid != 0 {
		problem("%d orders answered 201 paid are not paid", unpaid)
	}
	// Every refund answered 201 is there and succeeded; every one answered
	// 202 is there, and settled (no refund is left processing, above).
	ackSucceeded, ackProcessing := h.ackRefundsCopy()
	a.ackRefunds, a.ackProcessing = len(ackSucceeded), len(ackProcessing)
	var notSucceeded, notThere int
	if err := c.db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM unnest($1::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM refunds r WHERE r.id = a.id AND r.status = 'succeeded'))::int,
		(SELECT count(*) FROM unnest($2::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM refunds r WHERE r.id = a.id))::int`,
		ackSucceeded, ackProcessing).Scan(&notSucceeded, &notThere); err != nil {
		t.Fatalf("read acknowledged refunds: %v", err)
	}
	a.lostRefunds = notSucceeded + notThere
	if notSucceeded != 0 {
		problem("%d refunds answered 201 are not succeeded in the database", notSucceeded)
	}
	if notThere != 0 {
		problem("%d refunds answered 202 are not in the database", notThere)
	}

	// The books: one charge per paid order, none on the others.
	a.books = checkBooks(t, c)
	a.problems = append(a.problems, a.books.Problems...)

	// Seats: one ticket per seat, a seat booked if and only if it has its
	// ticket, and every booking answered 201 kept.
	var twice, mismatched, lostBookings int
	if err := c.db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM tickets GROUP BY event_id, seat HAVING count(*) > 1) d)::int,
		(SELECT count(*) FROM seats s WHERE (s.status = 'booked') <>
			EXISTS (SELECT 1 FROM tickets k WHERE k.event_id = s.event_id AND k.seat = s.seat))::int,
		(SELECT count(*) FROM unnest($1::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM bookings b WHERE b.id = a.id))::int,
		(SELECT count(*) FROM tickets)::int`, h.ackBookingsCopy()).Scan(&twice, &mismatched, &lostBookings, &a.tickets); err != nil {
		t.Fatalf("read seats: %v", err)
	}
	if twice != 0 {
		problem("%d seats with more than one ticket", twice)
	}
	if mismatched != 0 {
		problem("%d seats whose status disagrees with their ticket", mismatched)
	}
	a.lostBookings = lostBookings
	if lostBookings != 0 {
		problem("%d bookings answered 201 are not in the database", lostBookings)
	}

	// Likes: every post's counter rows add up to its likes.
	rows, err := c.db.Query(ctx, `SELECT p.id::text,
		(SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked)::int,
		(SELECT coalesce(sum(n), 0) FROM post_like_shards s WHERE s.post_id = p.id)::int FROM posts p`)
	if err != nil {
		t.Fatalf("read likes: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var liked, counted int
		if err := rows.Scan(&id, &liked, &counted); err != nil {
			t.Fatalf("read likes: %v", err)
		}
		a.liked += liked
		if liked != counted {
			problem("post %s: %d likes, counters say %d", id, liked, counted)
		}
	}
	return a
}

// checkBooks audits the books on one snapshot of the database (orders,
// payments and refunds read in one repeatable-read transaction), then the
// gateway's charges and their refunds: a charge or a refund is only ever
// made for a payment or a refund already committed, so the gateway read
// after the snapshot knows every one the snapshot records. It is called
// once the tables have settled (check); a pay request the client gave up
// on still runs on its replica for up to its budget, so if the snapshot
// caught one in flight, the audit waits for the tables to settle again and
// looks again.
func checkBooks(t *testing.T, c *cluster) books.Report {
	t.Helper()
	ctx := context.Background()
	var rep books.Report
	for try := range 4 {
		if try > 0 {
			time.Sleep(time.Second)
			settle(c, 15*time.Second)
		}
		tx, err := c.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatalf("books: %v", err)
		}
		orders, payments, err := books.FromDB(ctx, tx)
		if err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("books: %v", err)
		}
		refunds, err := books.RefundsFromDB(ctx, tx)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("books: %v", err)
		}
		charges, err := books.FromGateway(ctx, nil, c.gw.url)
		if err != nil {
			t.Fatalf("books: %v", err)
		}
		b := books.Books{Orders: orders, Payments: payments, Refunds: refunds, Charges: charges}
		if rep = b.Audit(); rep.InFlight == 0 {
			return rep
		}
	}
	rep.Problems = append(rep.Problems, fmt.Sprintf("%d orders still have a payment or a refund in flight", rep.InFlight))
	return rep
}

func (h *history) ackBookingsCopy() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string{}, h.ackBookings...)
}
