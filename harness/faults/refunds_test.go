//go:build faults

package faults

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The refund storm: admin agents refunding parts of paid orders at once,
// each with an Idempotency-Key of its own and each request sent twice at
// once with it (a retrying client), failed over with it when a replica
// does not answer, and sent again with it while every copy met a 5xx or
// no answer. Rows 13a–13d put the processor's faults of rows 6a–6d under
// it, row 14 kills a replica in the middle of refunds. The audits
// afterwards (audit_test.go, events_test.go) hold it to the refund's
// invariants: what the shop recorded is what the processor refunded, never
// more than was captured, each order's refunded_cents its refunds not
// failed, every refund acknowledged there, none left processing, stock
// back once per returned unit, one refund mail per refund that succeeded.

// The orders the storm refunds: refundUnits of the payer SKU (1500 cents
// each), so that an order takes a few rounds of agents to give back.
const (
	refundUnits  = 4
	refundAgents = 3 // agents refunding one order at once
	refundCopies = 2 // copies of an agent's request sent at once, with its key
	refundRetry  = 2 // retries of a request whose copies all met a 5xx or no answer
)

// refundable is a paid order the storm refunds in rounds, and what its
// agents learned of it.
type refundable struct {
	id    string
	left  int64 // cents left to refund as the last refusal said; -1 not known yet
	units int   // units not yet asked back
	done  bool  // nothing is left to refund
}

// refundStorm runs one round of agents on the client's order in hand,
// taking the next paid order when that one is done.
func (w *workload) refundStorm(ctx context.Context, c *client, rng *rand.Rand, current **refundable) {
	o := *current
	if o == nil || o.done {
		select {
		case o = <-w.refundable:
		default:
			// The orders paid before the scenario are spent: pay one now.
			if o = w.payForRefund(ctx, c, w.token(rng), flowRefundOrder); o == nil {
				pause(ctx, 100*time.Millisecond)
				return
			}
		}
		*current = o
	}
	// What the agents know of the order as the round begins; they write
	// what they learn into o, under mu.
	left, units := o.left, o.units
	var mu sync.Mutex
	var wg sync.WaitGroup
	returned := false
	for k := range refundAgents {
		body := map[string]any{}
		switch {
		case k == 0 && left > 0:
			// A refusal said what is left: the rest, racing the others.
		case !returned && units > 0 && rng.IntN(3) == 0:
			returned = true
			body["items"] = []map[string]any{{"sku": w.payerSKU, "quantity": 1}}
			body["reason"] = "returned"
		default:
			body["amount_cents"] = 300 + rng.IntN(1200)
		}
		wg.Go(func() {
			r := w.refundAgent(ctx, c, o.id, body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.status >= 200 && r.status < 300 && body["items"] != nil:
				o.units--
			case r.status == http.StatusConflict && r.code == "invalid_state",
				r.status == http.StatusBadRequest:
				// Refunded whole, or nothing left to give back or to
				// return: the order is done.
				o.done = true
			case r.status == http.StatusUnprocessableEntity && r.code == "refund_exceeds_remaining":
				var p struct {
					Remaining int64 `json:"remaining_cents"`
				}
				if json.Unmarshal(r.body, &p) == nil && (o.left < 0 || p.Remaining < o.left) {
					o.left = p.Remaining
				}
			}
		})
	}
	wg.Wait()
	if o.left == 0 {
		o.done = true
	}
}

// refundAgent sends one refund of order, refundCopies copies of it at once
// under one key, then the same again while all of them met a 5xx or no
// answer. A copy told request_in_progress is not sent again: its key is in
// hand elsewhere (the other copy, or a replica that was killed with it, and
// then the reconcilers settle its refund). It returns the outcome (the
// last answer when none came) and records every refund a 2xx named.
func (w *workload) refundAgent(ctx context.Context, c *client, order string, body map[string]any) reply {
	key := crand.Text()
	var last reply
	for try := range 1 + refundRetry {
		if try > 0 {
			pause(ctx, 200*time.Millisecond)
		}
		replies := make([]reply, refundCopies)
		var wg sync.WaitGroup
		for i := range replies {
			wg.Go(func() {
				replies[i] = c.do(ctx, flowRefund, "POST", "/v1/orders/"+order+"/refunds", adminToken, key, body)
			})
		}
		wg.Wait()
		outcome := false
		for _, r := range replies {
			c.hist.ackRefund(r)
			if r.settles() && (!outcome || r.useful()) {
				last, outcome = r, true
			} else if !outcome {
				last = r
			}
		}
		if outcome || ctx.Err() != nil {
			break
		}
	}
	return last
}

// payForRefund places an order of refundUnits for token and pays it with
// one click, recording both under flow; it returns the order when it was
// paid (201), else nil.
func (w *workload) payForRefund(ctx context.Context, c *client, token, flow string) *refundable {
	r := c.do(ctx, flow, "POST", "/v1/orders", token, crand.Text(),
		map[string]any{"items": []map[string]any{{"sku": w.payerSKU, "quantity": refundUnits}}})
	c.hist.ack(&c.hist.ackOrders, r)
	var o struct {
		ID string `json:"id"`
	}
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &o) != nil {
		return nil
	}
	r = c.do(ctx, flow, "POST", "/v1/orders/"+o.ID+"/payments", token, crand.Text(), map[string]string{"payment_method": "pm_card_ok"})
	if r.status != http.StatusCreated {
		return nil
	}
	c.hist.mu.Lock()
	c.hist.ackPaid = append(c.hist.ackPaid, o.ID)
	c.hist.mu.Unlock()
	return &refundable{id: o.ID, left: -1, units: refundUnits}
}

// settles says r is an outcome of its request, or says where its key is:
// anything but no answer and a 5xx.
func (r reply) settles() bool { return r.status != 0 && r.status < 500 }

// ackRefund records the refund a 2xx answer r names: 201 succeeded, 202
// processing. A later 201 of the same refund (its replay) stands.
func (h *history) ackRefund(r reply) {
	if r.status != http.StatusCreated && r.status != http.StatusAccepted {
		return
	}
	var created struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(r.body, &created) != nil || created.ID == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ackRefunds == nil {
		h.ackRefunds = map[string]int{}
	}
	if r.status == http.StatusCreated || h.ackRefunds[created.ID] == 0 {
		h.ackRefunds[created.ID] = r.status
	}
}

// ackRefundsCopy returns the refunds answered 201 and those answered only
// 202.
func (h *history) ackRefundsCopy() (succeeded, processing []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, status := range h.ackRefunds {
		if status == http.StatusCreated {
			succeeded = append(succeeded, id)
		} else {
			processing = append(processing, id)
		}
	}
	return succeeded, processing
}

// refundPool is how many paid orders the storm finds ready at the start
// of each scenario: enough for its clients (twice the size's) through
// every phase of a brief row. A client gives an order back in three
// rounds or so, and spent half an order a second at most on this machine
// (the processor killed: refunds answered 202 at once); the pool holds
// three quarters of an order a second for each.
func refundPool(sz size) int {
	seconds := (sz.brief[0] + sz.brief[1] + sz.brief[2]).Seconds()
	return int(0.75 * float64(2*sz.clients) * seconds)
}

// topUpRefundable pays, before a scenario with the refund storm, the
// orders it will refund, four at a time, through a client of its own:
// the storm then has paid orders to refund whatever the scenario does to
// the gateway.
func topUpRefundable(t *testing.T, c *cluster, w *workload) {
	t.Helper()
	if w.refundable == nil {
		w.refundable = make(chan *refundable, 4*w.poolTarget)
	}
	want := w.poolTarget - len(w.refundable)
	if want <= 0 {
		return
	}
	cl := newClient(c.replicaURLs, &history{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	jobs := make(chan int, want)
	for i := range want {
		jobs <- i
	}
	close(jobs)
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				if o := w.payForRefund(context.Background(), cl, w.tokens[i%len(w.tokens)], "setup"); o != nil {
					w.refundable <- o
				} else {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failed > 0 {
		t.Fatalf("refund storm: %d of %d orders could not be paid before the scenario", failed, want)
	}
}

// refundCounts reads what a replica's refund flow and its reconciler
// counted.
func refundCounts(p *process, out map[string]float64) {
	scrape(p, func(name, labels string, value float64) {
		switch name {
		case "shop_refunds_total":
			out["refunds "+labelValue(labels, "result")] += value
		case "shop_refund_reconciliations_total":
			out["refunds reconciled "+labelValue(labels, "outcome")] += value
		}
	})
}

// refundsLine is what the replicas' refund flows counted over a scenario
// (shop_refunds_total: a request, a copy that carried its refund on and a
// reconciler's call each count; shop_refund_reconciliations_total: each
// replica's reconciler counts the refunds it looked at) and what the audit
// found of the refunds the clients were told of.
func refundsLine(sum map[string]float64, a audit) string {
	return fmt.Sprintf("the refund flows counted %.0f succeeded, %.0f failed, %.0f unknown (left processing), %.0f refused; "+
		"the reconcilers found %.0f succeeded, %.0f failed, %.0f still unknown, %.0f settled meanwhile; "+
		"the clients were told of %d refunds succeeded (201) and %d processing (202 only): %d of them not found as told; %d refunds processing after the run",
		sum["refunds succeeded"], sum["refunds failed"], sum["refunds unknown"], sum["refunds refused"],
		sum["refunds reconciled succeeded"], sum["refunds reconciled failed"], sum["refunds reconciled unknown"], sum["refunds reconciled gone"],
		a.ackRefunds, a.ackProcessing, a.lostRefunds, a.stuckRefunds)
}

// probeRefunds is how many refunds beginOnReplica begins.
const probeRefunds = 3

// beginOnReplica has replica i begin refunds of its own, and returns once
// one of them is processing (in the processor's hands, its answer held
// back). The storm's clients alone do not always give the replica one:
// their balancer leaves a replica out for a while when its /readyz is
// slower than 300 ms, which the storm's load makes happen, and then a
// kill catches none of its refunds (seen: 11 refunds processing at the
// kill, all the survivor's, none left for the reconcilers). The refunds
// are 100 cents of the oldest paid orders with 100 cents left (an earlier
// row's pay storm, or the storm's own when the row runs alone), each sent
// once, straight to the replica, with a key of its own; the kill cuts
// their requests, and the reconcilers settle them.
func beginOnReplica(t *testing.T, c *cluster, i int) {
	t.Helper()
	ctx := context.Background()
	rows, err := c.db.Query(ctx, `SELECT id::text FROM orders WHERE status IN ('paid', 'fulfilled')
		AND refunded_cents <= total_cents - 100 ORDER BY created_at LIMIT $1`, probeRefunds)
	if err != nil {
		t.Fatalf("orders to refund: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		t.Fatalf("orders to refund: %v, %v", ids, err)
	}
	base := c.replicas[i].url
	for _, id := range ids {
		go func() {
			req, err := http.NewRequest(http.MethodPost, base+"/v1/orders/"+id+"/refunds", strings.NewReader(`{"amount_cents":100}`))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+adminToken)
			req.Header.Set("Idempotency-Key", crand.Text())
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		var n int
		if err := c.db.QueryRow(ctx, `SELECT count(*)::int FROM refunds WHERE order_id = ANY($1::uuid[]) AND status = 'processing'`, ids).Scan(&n); err != nil {
			t.Fatalf("refunds begun: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d began none of %d refunds within 3 s", i, len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicaKilledMidRefund is row 14: the processor's answers held back
// 600 ms for a second, so that replica 1 has refunds in hand between their
// begin and their settle, then replica 1 killed with SIGKILL and the
// processor given its speed back; the heal starts replica 1 again. Just
// before the kill, replica 1 is given refunds of its own to begin
// (beginOnReplica). The refunds processing at the kill that are still
// processing when the fault ends, 3 s on, are the killed replica's (the
// live one settles its own within a second): no request will settle them,
// the reconcilers must.
// The row's own floor is that the kill caught at least one, and the
// audit's that none is processing at its end.
func replicaKilledMidRefund() scenario {
	var mu sync.Mutex
	var atKill []string // the refunds processing when replica 1 was killed
	stillProcessing := func(c *cluster) float64 {
		mu.Lock()
		ids := append([]string(nil), atKill...)
		mu.Unlock()
		var n int
		if err := c.db.QueryRow(context.Background(), `SELECT count(*)::int FROM refunds
			WHERE id = ANY($1::uuid[]) AND status = 'processing'`, ids).Scan(&n); err != nil {
			c.t.Errorf("refunds processing: %v", err)
		}
		return float64(n)
	}
	return scenario{row: "14", flows: refundFlows, brief: true, stopsReplica: true,
		// Not half, as row 5's: the storm keeps six requests in flight per
		// client (24 at the small size), which the two replicas' pools
		// (SHOP_DB_MAX_CONNS=8 each) served with 16 connections before and
		// the survivor serves with 8. With 24 connections a replica (an
		// experiment, not a setting of the suite) the survivor kept
		// 110–136 % of before; with 8, 26–45 %.
		floors: []floor{{ofBefore: 0.2,
			why: "the storm keeps six requests in flight per client, more than the database connections of a replica (SHOP_DB_MAX_CONNS, 8): they had the two replicas' 16 before and have the survivor's 8 during, about half of before at best (a quarter to a half measured on this machine); the requests in hand on the killed one fail over at once with their keys, and the refunds it had begun are left to the reconcilers. The floor is a fifth"}},
		fault: func(t *testing.T, c *cluster) func() {
			c.toxic(c.gwPx, "hold", "latency", "downstream", `{"latency":600}`)
			time.Sleep(time.Second)
			beginOnReplica(t, c, 1)
			c.replicas[1].kill()
			rows, err := c.db.Query(context.Background(), `SELECT id::text FROM refunds WHERE status = 'processing'`)
			if err != nil {
				t.Fatalf("refunds processing: %v", err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("refunds processing: %v", err)
			}
			mu.Lock()
			atKill = ids
			mu.Unlock()
			if err := c.gwPx.Toxics.RemoveToxic(context.Background(), "hold"); err != nil {
				t.Errorf("remove the gateway's latency: %v", err)
			}
			return func() { c.restartReplica(1) }
		},
		observe: func(c *cluster) map[string]float64 {
			mu.Lock()
			n := len(atKill)
			mu.Unlock()
			return map[string]float64{"at kill": float64(n), "processing": stillProcessing(c)}
		},
		report: func(_ *testing.T, _ *cluster, healed, end map[string]float64) string {
			return fmt.Sprintf("refunds processing when replica 1 was killed: %.0f; of them still processing when the fault ended, 3 s on (the killed replica's, left to the reconcilers): %.0f; after the audit: %.0f",
				healed["at kill"], healed["processing"], end["processing"])
		},
		judge: func(healed, end map[string]float64) (string, bool) {
			return fmt.Sprintf("refunds the killed replica left processing ≥ 1: %.0f, all settled by the reconcilers: %.0f left", healed["processing"], end["processing"]),
				healed["processing"] >= 1 && end["processing"] == 0
		},
	}
}
