package lab

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/seats"
)

// scenarios are the races the page offers, by name.
var scenarios = map[string]scenario{
	"seat_rush":        {setup: seatRushSetup, request: seatRushRequest, check: seatRushCheck},
	"flash_sale":       {setup: flashSaleSetup, request: flashSaleRequest, check: flashSaleCheck},
	"pay_storm":        {setup: payStormSetup, request: payStormRequest, check: payStormCheck},
	"like_storm":       {setup: likeStormSetup, request: likeStormRequest, check: likeStormCheck},
	"redelivery_storm": {setup: stormSetup, request: stormRequest, settle: stormSettle, check: stormCheck},
	"refund_storm":     {setup: refundStormSetup, request: refundStormRequest, check: refundStormCheck},
}

// Flash sale: N buyers, one unit each, for N/2 units of one product.
// Invariant: units sold = units taken from stock ≤ the stock.

func flashSaleStock(size int) int { return max(1, size/2) }

func flashSaleSetup(ctx context.Context, r *run) error {
	r.sku = "LAB-" + r.id
	_, err := inventory.NewStore(r.target.Pool, nil).Create(ctx, inventory.Product{
		SKU: r.sku, Name: "Race lab flash sale " + r.id, PriceCents: 1500, StockAvailable: flashSaleStock(r.size),
	})
	if err != nil {
		return err
	}
	return r.users(ctx, r.size)
}

func flashSaleRequest(r *run, i int) request {
	return request{method: http.MethodPost, path: "/v1/orders", token: r.tokens[i],
		key:  fmt.Sprintf("lab-%s-%d", r.id, i),
		body: map[string]any{"items": []map[string]any{{"sku": r.sku, "quantity": 1}}}}
}

const sqlOrdersOfSKU = `SELECT count(*) FROM order_items WHERE sku = $1`

func flashSaleCheck(ctx context.Context, r *run, _ map[string]int) (check, error) {
	var p struct {
		Stock int64 `json:"stock_available"`
	}
	if err := r.callJSON(ctx, request{method: http.MethodGet, path: "/v1/products/" + r.sku}, &p); err != nil {
		return check{}, err
	}
	var orders int64
	if err := r.target.Pool.QueryRow(ctx, sqlOrdersOfSKU, r.sku).Scan(&orders); err != nil {
		return check{}, err
	}
	stock := int64(flashSaleStock(r.size))
	oversold := max(0, orders-stock)
	taken := stock - p.Stock
	c := check{
		ok: oversold == 0 && taken == orders,
		facts: map[string]int64{"units": stock, "orders": orders, "oversold": oversold,
			"stock_left": p.Stock, "lost_updates": orders - taken},
	}
	c.line = fmt.Sprintf("%d units, %d orders, %d oversold", stock, orders, oversold)
	if taken != orders {
		c.line += fmt.Sprintf("; %d left on the shelf, so %d decrements were lost", p.Stock, orders-taken)
	}
	return c, nil
}

// Pay storm: one order, N payments of it at once, each with its own key.
// Invariant: one charge at the gateway, one payment succeeded.

func payStormSetup(ctx context.Context, r *run) error {
	r.sku = "LAB-" + r.id
	_, err := inventory.NewStore(r.target.Pool, nil).Create(ctx, inventory.Product{
		SKU: r.sku, Name: "Race lab pay storm " + r.id, PriceCents: 1500, StockAvailable: 1,
	})
	if err != nil {
		return err
	}
	if err := r.users(ctx, 1); err != nil {
		return err
	}
	var o struct {
		ID string `json:"id"`
	}
	r.orderID = ""
	err = r.callJSON(ctx, request{method: http.MethodPost, path: "/v1/orders", token: r.tokens[0], key: "lab-" + r.id + "-order",
		body: map[string]any{"items": []map[string]any{{"sku": r.sku, "quantity": 1}}}}, &o)
	r.orderID = o.ID
	return err
}

func payStormRequest(r *run, i int) request {
	return request{method: http.MethodPost, path: "/v1/orders/" + r.orderID + "/payments", token: r.tokens[0],
		key: fmt.Sprintf("lab-%s-pay-%d", r.id, i), body: map[string]string{"payment_method": "pm_card_ok"}}
}

const sqlSucceededPayments = `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`

func payStormCheck(ctx context.Context, r *run, _ map[string]int) (check, error) {
	var charges struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	gw := &run{lab: r.lab, target: Target{URL: r.target.GatewayURL}}
	if err := gw.callJSON(ctx, request{method: http.MethodGet, path: "/v1/charges?reference=" + r.orderID}, &charges); err != nil {
		return check{}, fmt.Errorf("gateway: %w", err)
	}
	var succeeded int64
	if err := r.target.Pool.QueryRow(ctx, sqlSucceededPayments, r.orderID).Scan(&succeeded); err != nil {
		return check{}, err
	}
	var o struct {
		Status string `json:"status"`
	}
	if err := r.callJSON(ctx, request{method: http.MethodGet, path: "/v1/orders/" + r.orderID, token: r.tokens[0]}, &o); err != nil {
		return check{}, err
	}
	n := int64(len(charges.Items))
	c := check{
		ok:    n == 1 && succeeded == 1,
		facts: map[string]int64{"charges": n, "payments_succeeded": succeeded},
	}
	c.line = fmt.Sprintf("%s at the gateway, %s succeeded, order %s", plural(n, "charge"), plural(succeeded, "payment"), o.Status)
	return c, nil
}

// Like storm: N/2 users like one post, each clicking twice at once.
// Invariant: like_count = likers = liked rows.

func likeStormLikers(size int) int { return max(1, size/2) }

func likeStormSetup(ctx context.Context, r *run) error {
	if err := r.users(ctx, likeStormLikers(r.size)); err != nil {
		return err
	}
	var p struct {
		ID string `json:"id"`
	}
	err := r.callJSON(ctx, request{method: http.MethodPost, path: "/v1/posts", token: r.tokens[0],
		body: map[string]string{"title": "Race lab like storm " + r.id}}, &p)
	r.postID = p.ID
	return err
}

func likeStormRequest(r *run, i int) request {
	return request{method: http.MethodPut, path: "/v1/posts/" + r.postID + "/like", token: r.tokens[i/2]}
}

const sqlLikedRows = `SELECT count(*) FROM likes WHERE post_id = $1 AND liked`

func likeStormCheck(ctx context.Context, r *run, _ map[string]int) (check, error) {
	var p struct {
		LikeCount int64 `json:"like_count"`
	}
	if err := r.callJSON(ctx, request{method: http.MethodGet, path: "/v1/posts/" + r.postID, token: r.tokens[0]}, &p); err != nil {
		return check{}, err
	}
	var rows int64
	if err := r.target.Pool.QueryRow(ctx, sqlLikedRows, r.postID).Scan(&rows); err != nil {
		return check{}, err
	}
	likers := int64(likeStormLikers(r.size))
	return check{
		ok:    p.LikeCount == likers && rows == likers,
		line:  fmt.Sprintf("%d likers, like_count %d, %d likes stored", likers, p.LikeCount, rows),
		facts: map[string]int64{"likers": likers, "like_count": p.LikeCount, "liked_rows": rows},
	}, nil
}

// plural writes "1 charge" or "2 charges".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Seat rush: N users hold seat A1 of one event at once.
// Invariant: one active hold on the seat.

func seatRushSetup(ctx context.Context, r *run) error {
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	r.eventID = id.String()
	err = seats.NewStore(r.target.Pool).CreateEvent(ctx, seats.Event{ID: r.eventID, Name: "Race lab seat rush " + r.id,
		Rows: 1, SeatsPerRow: 10, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)})
	if err != nil {
		return err
	}
	return r.users(ctx, r.size)
}

func seatRushRequest(r *run, i int) request {
	return request{method: http.MethodPost, path: "/v1/events/" + r.eventID + "/holds", token: r.tokens[i],
		key: fmt.Sprintf("lab-%s-%d", r.id, i), body: map[string]any{"seats": []string{"A1"}}}
}

const sqlActiveHoldsOfSeat = `SELECT count(*) FROM hold_seats WHERE event_id = $1 AND seat = 'A1' AND active`

func seatRushCheck(ctx context.Context, r *run, tally map[string]int) (check, error) {
	var seatMap struct {
		Items []struct {
			Seat   string `json:"seat"`
			Status string `json:"status"`
		} `json:"items"`
	}
	if err := r.callJSON(ctx, request{method: http.MethodGet, path: "/v1/events/" + r.eventID + "/seats"}, &seatMap); err != nil {
		return check{}, err
	}
	status := "unknown"
	for _, s := range seatMap.Items {
		if s.Seat == "A1" {
			status = s.Status
		}
	}
	var active int64
	if err := r.target.Pool.QueryRow(ctx, sqlActiveHoldsOfSeat, r.eventID).Scan(&active); err != nil {
		return check{}, err
	}
	held := int64(tally["201"])
	return check{
		ok:    active == 1 && held == 1,
		line:  fmt.Sprintf("seat A1 %s: %s granted, %s on it, %d double-booked", status, plural(held, "hold"), plural(active, "active hold"), max(0, active-1)),
		facts: map[string]int64{"holds_granted": held, "active_holds": active, "double_booked": max(0, active-1)},
	}, nil
}
