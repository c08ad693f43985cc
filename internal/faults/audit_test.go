//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/books"
	"github.com/shop-example/shop/internal/platform/testenv"
)

// Stock of the fixture's SKUs: the flash sale's runs out during a run;
// the pay storm's does not.
const (
	flashStock = 400
	payerStock = 1_000_000
)

// setUp registers users, the two SKUs and the hot posts, straight in the
// database or through the admin API of a replica.
func setUp(t *testing.T, c *cluster, users, posts int) *workload {
	t.Helper()
	us := testenv.Users(t, c.db, users)
	w := &workload{flashSKU: "SKU-FLASH", payerSKU: "SKU-PAYER"}
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
		var id string
		if err := c.db.QueryRow(ctx, `INSERT INTO posts (id, author_id, title, like_shards, created_at)
			SELECT gen_random_uuid(), id, $1, 4, now() FROM users ORDER BY name LIMIT 1 RETURNING id::text`,
			fmt.Sprintf("hot post %d", i)).Scan(&id); err != nil {
			t.Fatalf("create post: %v", err)
		}
		w.posts = append(w.posts, id)
	}
	return w
}

// audit is what the invariants found after a scenario, once settled.
type audit struct {
	problems []string
	books    books.Report
	sold     map[string]int
	liked    int
	stuck    int // payments still processing after the settle wait
}

// settle waits until no payment is processing (the reconcilers finish
// what the fault left in flight), at most wait.
func settle(c *cluster, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for {
		var n int
		if err := c.db.QueryRow(context.Background(),
			`SELECT count(*) FROM payments WHERE status = 'processing'`).Scan(&n); err != nil {
			n = -1
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// check runs every audit on the database and the gateway.
func check(t *testing.T, c *cluster, w *workload, h *history) audit {
	t.Helper()
	ctx := context.Background()
	a := audit{sold: map[string]int{}}
	a.stuck = settle(c, 30*time.Second)
	if a.stuck != 0 {
		a.problems = append(a.problems, fmt.Sprintf("%d payments still processing 30 s after the run", a.stuck))
	}
	problem := func(format string, args ...any) { a.problems = append(a.problems, fmt.Sprintf(format, args...)) }

	// Orders vs stock: what left the shelf is what the live orders hold.
	for sku, initial := range map[string]int{w.flashSKU: flashStock, w.payerSKU: payerStock} {
		var stock, held int
		if err := c.db.QueryRow(ctx, `SELECT stock_available FROM products WHERE sku = $1`, sku).Scan(&stock); err != nil {
			t.Fatalf("read stock: %v", err)
		}
		if err := c.db.QueryRow(ctx, `SELECT coalesce(sum(i.quantity), 0)::int FROM order_items i
			WHERE i.sku = $1 AND NOT EXISTS (SELECT 1 FROM stock_releases r WHERE r.order_id = i.order_id)`, sku).Scan(&held); err != nil {
			t.Fatalf("read orders: %v", err)
		}
		a.sold[sku] = initial - stock
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
		WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = a.id AND o.status = 'paid')`, ackPaid).Scan(&unpaid); err != nil {
		t.Fatalf("read acknowledged payments: %v", err)
	}
	if missing != 0 {
		problem("%d orders answered 201 are not in the database", missing)
	}
	if unpaid != 0 {
		problem("%d orders answered 201 paid are not paid", unpaid)
	}

	// The books: one charge per paid order, none on the others.
	rep, err := books.Check(ctx, c.db, nil, c.gw.url)
	if err != nil {
		t.Fatalf("books: %v", err)
	}
	a.books = rep
	a.problems = append(a.problems, rep.Problems...)

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
