package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// Redelivery storm: N/10 orders are paid, then each one's order.paid
// event is delivered ten times at once (N copies in all), written into
// the stream together as a broker delivering again after a consumer
// crashed, or after a Redis failover, would. No copy has been handled
// before the storm: the copies race the first handling, not a finished
// one. Invariant: each order fulfilled once (one fulfilments row, status
// fulfilled) and mailed one receipt.
//
// The target's consumers are the shop's: the fulfilment (inbox, the
// order's lock, the state rule, the version, fulfilments_pkey) and the
// mail (inbox, the state rule, and the provider's Idempotency-Key).

// stormCopies is how many copies of each event a storm delivers.
const stormCopies = 10

func stormOrders(size int) int { return max(1, size/stormCopies) }

// MailReplayed is the series of a target's mails that its provider
// answered from a key it remembered (Idempotent-Replayed): copies of one
// event that the provider's key made one mail. The service counts it
// where its consumers call the lab's provider.
const MailReplayed = "shop_lab_mail_replayed_total"

func stormSetup(ctx context.Context, r *run) error {
	if r.target.Events == nil || r.target.MailerURL == "" {
		return errors.New("the target has no event stream or mail provider")
	}
	n := stormOrders(r.size)
	r.sku = "LAB-" + r.id
	_, err := inventory.NewStore(r.target.Pool, nil).Create(ctx, inventory.Product{
		SKU: r.sku, Name: "Race lab redelivery storm " + r.id, PriceCents: 1500, StockAvailable: n,
	})
	if err != nil {
		return err
	}
	if err := r.users(ctx, n); err != nil {
		return err
	}
	// One order per user, each paid once: the storm is about what the
	// payment's event sets off, not the payment.
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
				body: map[string]any{"items": []map[string]any{{"sku": r.sku, "quantity": 1}}}}, &o)
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
	if err := g.Wait(); err != nil {
		return err
	}
	// Each payment wrote its order's event in its transaction; the copies
	// are of that event, as the outbox holds it.
	r.paid = make([]outbox.Event, n)
	for i, id := range r.orderIDs {
		if r.paid[i], err = r.target.Events.Event(ctx, outbox.OrderPaid, id); err != nil {
			return err
		}
	}
	return nil
}

// stormRequest is a copy of one order's event; the copies of one order
// are side by side in the stream, so that the consumers reading it take
// several of them at once.
func stormRequest(r *run, i int) request {
	return request{copyOf: &r.paid[i*len(r.paid)/r.size]}
}

// stormSettle waits until the consumers have handled every copy. A copy
// a consumer could not handle yet (the order's lock held) goes back to
// it after a pause; it is handled once acknowledged.
func stormSettle(ctx context.Context, r *run) error {
	for {
		done, err := r.target.Events.Handled(ctx, outbox.OrderPaid)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the consumers had not handled every copy: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

const (
	sqlFulfilmentsOf   = `SELECT order_id, count(*) FROM fulfilments WHERE order_id = ANY($1) GROUP BY order_id`
	sqlFulfilledOrders = `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'fulfilled'`
)

func stormCheck(ctx context.Context, r *run, _ map[string]int) (check, error) {
	rows, err := r.target.Pool.Query(ctx, sqlFulfilmentsOf, r.orderIDs)
	if err != nil {
		return check{}, err
	}
	perOrder := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return check{}, err
		}
		perOrder[id] = n
	}
	if err := rows.Err(); err != nil {
		return check{}, err
	}
	var statusFulfilled int64
	if err := r.target.Pool.QueryRow(ctx, sqlFulfilledOrders, r.orderIDs).Scan(&statusFulfilled); err != nil {
		return check{}, err
	}
	mail := &run{lab: r.lab, target: Target{URL: r.target.MailerURL}}
	var fulfilments, twice, receipts, duplicates, missing int64
	for _, id := range r.orderIDs {
		n := perOrder[id]
		fulfilments += n
		if n > 1 {
			twice++
		}
		var sent struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		q := url.Values{"reference": {id}, "kind": {"receipt"}}
		if err := mail.callJSON(ctx, request{method: http.MethodGet, path: "/v1/messages?" + q.Encode()}, &sent); err != nil {
			return check{}, fmt.Errorf("mailer: %w", err)
		}
		got := int64(len(sent.Items))
		receipts += got
		duplicates += max(0, got-1)
		if got == 0 {
			missing++
		}
	}
	orders := int64(len(r.orderIDs))
	unfulfilled := orders - int64(len(perOrder))
	c := check{
		ok: fulfilments == orders && unfulfilled == 0 && statusFulfilled == orders && receipts == orders && missing == 0,
		facts: map[string]int64{"orders": orders, "deliveries": int64(r.size), "fulfilments": fulfilments,
			"fulfilled_twice": twice, "unfulfilled": unfulfilled, "receipts": receipts,
			"duplicate_receipts": duplicates, "missing_receipts": missing},
	}
	c.line = fmt.Sprintf("%s, %d deliveries of their order.paid: %s", plural(orders, "order"), r.size, plural(fulfilments, "fulfilment"))
	if twice > 0 {
		c.line += fmt.Sprintf(" (%d fulfilled more than once)", twice)
	}
	if unfulfilled > 0 {
		c.line += fmt.Sprintf(" (%d not fulfilled)", unfulfilled)
	}
	c.line += ", " + plural(receipts, "receipt")
	if duplicates > 0 {
		c.line += fmt.Sprintf(" (%d duplicates)", duplicates)
	}
	if missing > 0 {
		c.line += fmt.Sprintf(" (%d orders without one)", missing)
	}
	return c, nil
}
