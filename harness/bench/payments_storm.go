package bench

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/barrier"
	gw "github.com/shop-example/shop/harness/gateway"
)

// sharedClicks is how many of an order's clicks share its one key (a client
// retrying the same request): two thirds, rounded down. The others each
// carry a key of their own (a user clicking again).
func sharedClicks(clicks int) int { return clicks * 2 / 3 }

// stormResult is one storm: how long it took to settle and whether every
// order ended charged once.
type stormResult struct {
	requests   int
	settle     time.Duration   // first request sent → last answer received
	paidAfter  []time.Duration // per order, its first request → the 201 that paid it; sorted
	answers    map[string]int  // "201", "201 replayed", "409 resource_busy", ...
	orders     int
	violations []string // one per order that is not paid exactly once
}

// runStorms runs o.storms storms through the layered service, one after the
// other, each on its own orders. The requests go over connections opened
// beforehand, one per click, so that a storm measures the service, not the
// TCP handshakes of the load generator.
func runStorms(ctx context.Context, o benchOptions, svc *service, processor *gw.Server, pool *pgxpool.Pool, orders []*pendingOrders, logger *slog.Logger) ([]stormResult, error) {
	if len(orders) == 0 {
		return nil, nil
	}
	n := o.stormOrders * o.stormClicks
	transport := &http.Transport{MaxIdleConns: n, MaxIdleConnsPerHost: n, IdleConnTimeout: time.Minute}
	defer transport.CloseIdleConnections()
	storm := *svc
	storm.client = &http.Client{Transport: transport, Timeout: svc.client.Timeout}
	barrier.Together(n, func(int) {
		if resp, err := storm.client.Get(storm.base + "/healthz"); err == nil {
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
		}
	})

	stopProfile, err := startProfile(o.cpuProfile, scenario{name: "layered/storm", layered: true})
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	var results []stormResult
	for i, po := range orders {
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			logger.Warn("bench: checkpoint refused", "err", err)
		}
		logger.Info("bench: running", "scenario", "layered/storm", "storm", i+1)
		r := runStorm(ctx, &storm, po, o.stormClicks)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := checkStorm(ctx, pool, processor, po, &r); err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// runStorm fires clicks pay requests at every order at once and waits for
// every answer. Refused clicks are not retried.
func runStorm(ctx context.Context, svc *service, orders *pendingOrders, clicks int) stormResult {
	n := len(orders.ids)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = crand.Text()
	}
	begins, ends := make([]time.Time, n*clicks), make([]time.Time, n*clicks)
	labels := make([]string, n*clicks)
	barrier.Together(n*clicks, func(i int) {
		order, click := i%n, i/n
		key := keys[order]
		if click >= sharedClicks(clicks) {
			key = crand.Text()
		}
		begins[i] = time.Now()
		a := svc.post(ctx, svc.tokens[orders.owners[order]], "/v1/orders/"+orders.ids[order]+"/payments", payBody, key)
		ends[i] = time.Now()
		labels[i] = a.label()
	})

	r := stormResult{requests: n * clicks, orders: n, answers: map[string]int{}}
	first, last := begins[0], ends[0]
	for order := range n {
		of := begins[order]
		var paid time.Time
		for i := order; i < n*clicks; i += n {
			of = minTime(of, begins[i])
			first, last = minTime(first, begins[i]), maxTime(last, ends[i])
			if labels[i] == "201" {
				paid = ends[i]
			}
			r.answers[labels[i]]++
		}
		if !paid.IsZero() { // else the invariant check reports the order
			r.paidAfter = append(r.paidAfter, paid.Sub(of))
		}
	}
	slices.Sort(r.paidAfter)
	r.settle = last.Sub(first)
	return r
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// label names an answer by its status and, for a problem, its code.
func (a answer) label() string {
	switch {
	case a.transport != "":
		return a.transport
	case a.status == http.StatusCreated && a.replayed:
		return "201 replayed"
	case a.status < 400:
		return strconv.Itoa(a.status)
	}
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(a.body, &p) != nil || p.Code == "" {
		return strconv.Itoa(a.status)
	}
	return strconv.Itoa(a.status) + " " + p.Code
}

// sqlStormOutcome is, per order, its status, its succeeded and processing
// payments, and the charge its succeeded payment recorded.
const sqlStormOutcome = `SELECT o.id::text, o.status,
		count(p.id) FILTER (WHERE p.status = 'succeeded'),
		count(p.id) FILTER (WHERE p.status = 'processing'),
		coalesce(max(p.charge_id) FILTER (WHERE p.status = 'succeeded'), '')
	FROM orders o LEFT JOIN payments p ON p.order_id = o.id
	WHERE o.id = ANY($1::uuid[])
	GROUP BY o.id, o.status`

// checkStorm checks the invariant on the database and the gateway's audit,
// not on the answers: each order is paid, with one succeeded payment and
// none processing, and one charge in the gateway, the one recorded.
func checkStorm(ctx context.Context, pool *pgxpool.Pool, processor *gw.Server, orders *pendingOrders, r *stormResult) error {
	rows, err := pool.Query(ctx, sqlStormOutcome, orders.ids)
	if err != nil {
		return fmt.Errorf("check storm: %w", err)
	}
	seen := 0
	var id, status, chargeID string
	var succeeded, processing int
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &succeeded, &processing, &chargeID}, func() error {
		seen++
		charges := processor.Charges(id)
		if (status != "paid" && status != "fulfilled") || succeeded != 1 || processing != 0 || len(charges) != 1 || charges[0].ID != chargeID {
			r.violations = append(r.violations, fmt.Sprintf("order %s: %s, %d succeeded and %d processing payments, %d charges in the gateway",
				id, status, succeeded, processing, len(charges)))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check storm: %w", err)
	}
	if seen != len(orders.ids) {
		return fmt.Errorf("check storm: %d of %d orders found", seen, len(orders.ids))
	}
	return nil
}

// printStorms writes a line per storm, then any broken invariant.
func printStorms(w io.Writer, storms []stormResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| storm\t requests\t settle\t paid after p50\t paid after p99\t answers\t invariant\t")
	fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---:\t---\t---\t")
	var broken []string
	for i, s := range storms {
		verdict := fmt.Sprintf("holds: %d/%d orders paid once, one charge each", s.orders-len(s.violations), s.orders)
		if len(s.violations) > 0 {
			verdict = fmt.Sprintf("BROKEN for %d of %d orders", len(s.violations), s.orders)
			broken = append(broken, s.violations...)
		}
		fmt.Fprintf(tw, "| %d\t %d\t %s\t %s\t %s\t %s\t %s\t\n", i+1, s.requests, millis(s.settle),
			millis(percentile(s.paidAfter, 0.50)), millis(percentile(s.paidAfter, 0.99)), countSummary(s.answers), verdict)
	}
	tw.Flush()
	for i, v := range broken {
		if i == 10 {
			fmt.Fprintf(w, "… and %d more\n", len(broken)-i)
			break
		}
		fmt.Fprintln(w, v)
	}
}
