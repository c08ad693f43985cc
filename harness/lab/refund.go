package lab

import (
	"context"
	"fmt"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/shop-example/shop/internal/inventory"
)

// Refund storm: N/10 paid orders, and ten support agents on each (the
// admin token, a key each) refunding 60 % of it at once: hyperswitch's
// two $60 refunds of a $100 payment, ten times over. Invariant, read from
// the copy's tables and its processor's audit (GET
// /v1/charges?reference=): per order, the processor gives back at most
// what it captured; the refunds it made are those the shop recorded as
// succeeded (by the processor's refund id); the order holds what its
// refunds not failed add up to; and none is left processing.
//
// The copy refunds through the shop's flow (the key, the order's advisory
// lock, the refund rule, the order written at its version,
// orders_refunded_within_total). A sandbox's processor has its own check
// of refunds off, so what a missing layer lets through is given back.

// refundAgents is how many agents refund each order at once.
const refundAgents = 10

// An order of the storm: refundUnits units at refundPrice, of which each
// agent asks refundPart back.
const (
	refundUnits = 4
	refundPrice = 2500
	refundTotal = refundUnits * refundPrice
	refundPart  = refundTotal * 6 / 10
)

func refundOrders(size int) int { return max(1, size/refundAgents) }

func refundStormSetup(ctx context.Context, r *run) error {
	if r.target.AdminToken == "" {
		return fmt.Errorf("the target has no admin token for its support agents")
	}
	n := refundOrders(r.size)
	r.sku = "LAB-" + r.id
	_, err := inventory.NewStore(r.target.Pool, nil).Create(ctx, inventory.Product{
		SKU: r.sku, Name: "Race lab refund storm " + r.id, PriceCents: refundPrice, StockAvailable: n * refundUnits,
	})
	if err != nil {
		return err
	}
	if err := r.users(ctx, n); err != nil {
		return err
	}
	// Each buyer places one order and pays it through the API: the storm
	// is about what comes back, not the payment.
	r.orderIDs = make([]string, n)
	var g errgroup.Group
	g.SetLimit(4)
	for i := range n {
		g.Go(func() error {
			var o struct {
				ID string `json:"id"`
			}
			err := r.callJSON(ctx, request{method: http.MethodPost, path: "/v1/orders", token: r.tokens[i],
				key:  fmt.Sprintf("lab-%s-order-%d", r.id, i),
				body: map[string]any{"items": []map[string]any{{"sku": r.sku, "quantity": refundUnits}}}}, &o)
			if err != nil {
				return err
			}
			var p struct {
				Status string `json:"status"`
			}
			err = r.callJSON(ctx, request{method: http.MethodPost, path: "/v1/orders/" + o.ID + "/payments", token: r.tokens[i],
				key: fmt.Sprintf("lab-%s-pay-%d", r.id, i), body: map[string]string{"payment_method": "pm_card_ok"}}, &p)
			if err == nil && p.Status != "succeeded" {
				err = fmt.Errorf("payment of order %s: %s", o.ID, p.Status)
			}
			r.orderIDs[i] = o.ID
			return err
		})
	}
	return g.Wait()
}

// refundStormRequest is agent i's refund of 60 % of its order; the agents
// of one order are side by side.
func refundStormRequest(r *run, i int) request {
	return request{method: http.MethodPost, path: "/v1/orders/" + r.orderIDs[i*len(r.orderIDs)/r.size] + "/refunds",
		token: r.target.AdminToken, key: fmt.Sprintf("lab-%s-refund-%d", r.id, i),
		body: map[string]any{"amount_cents": refundPart, "reason": "race lab refund storm"}}
}

const (
	sqlRefundsOf          = `SELECT order_id::text, status, amount_cents, coalesce(processor_refund_id, '') FROM refunds WHERE order_id = ANY($1)`
	sqlRefundedCentsOf    = `SELECT id::text, refunded_cents FROM orders WHERE id = ANY($1)`
	refundStatusFailed    = "failed"
	refundStatusSucceeded = "succeeded"
)

// shopRefund is a refund as the copy's tables hold it.
type shopRefund struct {
	status      string
	amountCents int64
	processorID string
}

// processorCharge is a charge as the processor's audit lists it.
type processorCharge struct {
	AmountCents   int64 `json:"amount_cents"`
	RefundedCents int64 `json:"refunded_cents"`
	Refunds       []struct {
		ID          string `json:"id"`
		AmountCents int64  `json:"amount_cents"`
	} `json:"refunds"`
}

func refundStormCheck(ctx context.Context, r *run, _ map[string]int) (check, error) {
	recorded, err := r.shopRefunds(ctx)
	if err != nil {
		return check{}, err
	}
	held, err := r.refundedCents(ctx)
	if err != nil {
		return check{}, err
	}
	gw := &run{lab: r.lab, target: Target{URL: r.target.GatewayURL}}
	var captured, given, over, made, succeeded, unrecorded, unmade, processing, overOrders, misheld int64
	for _, id := range r.orderIDs {
		var charges struct {
			Items []processorCharge `json:"items"`
		}
		if err := gw.callJSON(ctx, request{method: http.MethodGet, path: "/v1/charges?reference=" + id}, &charges); err != nil {
			return check{}, fmt.Errorf("gateway: %w", err)
		}
		atProcessor := map[string]bool{}
		var orderCaptured, orderGiven int64
		for _, c := range charges.Items {
			orderCaptured += c.AmountCents
			for _, f := range c.Refunds {
				atProcessor[f.ID] = true
				orderGiven += f.AmountCents
			}
		}
		captured, given, made = captured+orderCaptured, given+orderGiven, made+int64(len(atProcessor))
		if orderGiven > orderCaptured {
			over += orderGiven - orderCaptured
			overOrders++
		}
		var holds int64
		seen := map[string]bool{}
		for _, f := range recorded[id] {
			if f.status != refundStatusFailed {
				holds += f.amountCents
			}
			switch f.status {
			case refundStatusSucceeded:
				succeeded++
				seen[f.processorID] = true
				if !atProcessor[f.processorID] {
					unmade++
				}
			case refundStatusFailed:
			default:
				processing++
			}
		}
		for pid := range atProcessor {
			if !seen[pid] {
				unrecorded++
			}
		}
		if holds != held[id] {
			misheld++
		}
	}
	orders := int64(len(r.orderIDs))
	c := check{
		ok: over == 0 && unrecorded == 0 && unmade == 0 && misheld == 0 && processing == 0,
		facts: map[string]int64{"orders": orders, "agents": int64(r.size), "captured_cents": captured, "refunded_cents": given,
			"over_refunded_cents": over, "orders_over_refunded": overOrders, "refunds_at_processor": made,
			"refunds_recorded": succeeded, "refunds_unrecorded": unrecorded, "refunds_unmade": unmade,
			"refunds_processing": processing, "orders_misheld": misheld},
	}
	c.line = fmt.Sprintf("%s of %d cents, %d agents asking %d each: %s at the processor, %d recorded; %d cents given back beyond the %d captured",
		plural(orders, "order"), refundTotal, r.size, refundPart, plural(made, "refund"), succeeded, over, captured)
	if overOrders > 0 {
		c.line += fmt.Sprintf(" (%d of the orders refunded more than they were charged)", overOrders)
	}
	if unrecorded > 0 {
		c.line += fmt.Sprintf("; %d made at the processor and recorded by no refund", unrecorded)
	}
	if unmade > 0 {
		c.line += fmt.Sprintf("; %d recorded that the processor never made", unmade)
	}
	if misheld > 0 {
		c.line += fmt.Sprintf("; %d orders hold other than their refunds", misheld)
	}
	if processing > 0 {
		c.line += fmt.Sprintf("; %d still processing", processing)
	}
	return c, nil
}

// shopRefunds are the refunds of the run's orders, by order.
func (r *run) shopRefunds(ctx context.Context) (map[string][]shopRefund, error) {
	rows, err := r.target.Pool.Query(ctx, sqlRefundsOf, r.orderIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]shopRefund{}
	for rows.Next() {
		var id string
		var f shopRefund
		if err := rows.Scan(&id, &f.status, &f.amountCents, &f.processorID); err != nil {
			return nil, err
		}
		out[id] = append(out[id], f)
	}
	return out, rows.Err()
}

// refundedCents is what each of the run's orders holds for its refunds.
func (r *run) refundedCents(ctx context.Context) (map[string]int64, error) {
	rows, err := r.target.Pool.Query(ctx, sqlRefundedCentsOf, r.orderIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
