package lab_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/testenv"
)

// consumed is the series of a consumer's deliveries of order.paid that
// ended in outcome, as the lab's outcome names it.
func consumed(consumer, outcome string) string {
	return `shop_events_consumed_total{consumer="` + consumer + `",event="order.paid",outcome="` + outcome + `"}`
}

// stopped is the series of the conflicts layer stopped in flow.
func stopped(flow, layer string) string {
	return `shop_conflicts_stopped_total{flow="` + flow + `",layer="` + layer + `"}`
}

// handled adds up a consumer's deliveries of order.paid, whatever their
// outcome.
func handled(m map[string]float64, consumer string) float64 {
	var n float64
	for _, o := range []string{"processed", "deduplicated", "skipped", "failed"} {
		n += m[consumed(consumer, o)]
	}
	return n
}

// stormOrders reads the orders of a storm run from schema: those of the
// run's product.
func stormOrders(t *testing.T, e *apptest.Env, schema, run string) []string {
	t.Helper()
	rows, err := e.DB.Query(context.Background(), `SELECT o.id::text FROM `+schema+`.orders o
		JOIN `+schema+`.order_items i ON i.order_id = o.id WHERE i.sku = $1`, "LAB-"+run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestLab_RedeliveryStormLive: with every layer on, fifty copies of five
// paid orders' order.paid, written into the live copy's stream at once,
// reach the consumers of both replicas' copies, racing the first handling
// of each event. Each order is fulfilled once and mailed one receipt, at
// the lab's provider; every copy was handled, the first of each processed
// and the other 45 stopped; the shop's own streams, provider, inbox and
// fulfilments never see one of them.
func TestLab_RedeliveryStormLive(t *testing.T) {
	s := apptest.StartWith(t, 2, apptest.StackOptions{Vars: map[string]string{"SHOP_DEMO": "true"},
		Names: []string{"api-1", "api-2"}, LabGateway: true, LabMailer: true})
	e := s.Env
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	before := shopRows(t, e)
	realMail := len(e.Mailer.Messages(""))

	const size, orders = 50, 5
	run := startRace(t, e.R(0), u.Token, map[string]any{"scenario": "redelivery_storm", "size": size})
	t.Logf("%s; %v", run.Out.Line, run.Out.Metrics)
	if run.Start.Target != "live" || !run.Out.OK {
		t.Fatalf("start %+v, outcome %+v; want a live run that holds", run.Start, run.Out)
	}
	if run.Out.Tally["202"] != size || len(run.Out.From) != 2 {
		t.Errorf("tally %v, counters of %v; want %d copies accepted and both replicas' counters", run.Out.Tally, run.Out.From, size)
	}
	// Both replicas' consumers took copies: two consumers, each handling
	// every copy once.
	if r := run.Out.Replicas; len(r) != 2 || r["api-1"] == 0 || r["api-2"] == 0 || r["api-1"]+r["api-2"] != 2*size {
		t.Errorf("deliveries by replica %v, want both, %d in all", r, 2*size)
	}

	// The outcome is the live copy's tables and the lab's provider.
	ids := stormOrders(t, e, "shop_lab_live", run.Start.Run)
	if len(ids) != orders {
		t.Fatalf("%d orders in the live copy, want %d", len(ids), orders)
	}
	for _, id := range ids {
		if n := e.Count(t, `SELECT count(*) FROM shop_lab_live.fulfilments WHERE order_id = $1`, id); n != 1 {
			t.Errorf("order %s: %d fulfilments, want 1", id, n)
		}
		if got := receiptsOf(e.LabMailer, id); got != 1 {
			t.Errorf("order %s: %d receipts at the lab's provider, want 1", id, got)
		}
	}

	// Work shown: every copy handled by each consumer, one processed per
	// order, the rest stopped, and the layers that stopped them counted.
	m := run.Out.Metrics
	for _, c := range []string{"fulfilment", "mailer"} {
		if got, first := handled(m, c), m[consumed(c, "processed")]; got != size || first != orders {
			t.Errorf("%s: %v deliveries handled, %v processed; want %d and %d", c, got, first, size, orders)
		}
	}
	var byLayer float64
	for _, layer := range []string{"idempotency", "lock", "state", "version", "constraint"} {
		byLayer += m[stopped("fulfil_order", layer)]
	}
	if byLayer < size-orders {
		t.Errorf("the fulfilment's layers stopped %v copies, want at least the %d that were not the first", byLayer, size-orders)
	}

	// Nothing of it in the shop.
	for what, n := range shopRows(t, e) {
		if n != before[what] {
			t.Errorf("the real shop's %s went from %d to %d", what, before[what], n)
		}
	}
	if n := len(e.Mailer.Messages("")); n != realMail {
		t.Errorf("the shop's provider sent %d mails during the storm", n-realMail)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddrs(t)[0]})
	defer rdb.Close()
	if n, err := rdb.XLen(context.Background(), e.Cfg.Events.Prefix+"order.paid").Result(); err != nil || n != 0 {
		t.Errorf("the shop's order.paid stream holds %d entries (%v), want none", n, err)
	}
}

func receiptsOf(m *mailer.Server, order string) int {
	n := 0
	for _, msg := range m.Messages(order) {
		if msg.Kind == mailer.KindReceipt {
			n++
		}
	}
	return n
}

// TestLab_RedeliveryStormSandbox: the same storm in the sandbox breaks
// where a layer the copies race past is off, and for that reason.
func TestLab_RedeliveryStormSandbox(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	storm := func(t *testing.T, size int, off ...string) (race, []string) {
		t.Helper()
		orders := size / 10
		e.Clock.Advance(2 * time.Second) // a second between two runs
		run := startRace(t, e.R(0), u.Token, map[string]any{"scenario": "redelivery_storm", "size": size, "layers_off": off})
		t.Logf("%v off: %s; %v", off, run.Out.Line, run.Out.Metrics)
		if run.Start.Target != "sandbox" {
			t.Fatalf("start %+v: want the sandbox", run.Start)
		}
		schema := "shop_lab"
		for _, o := range off {
			if o == "constraint" {
				schema = "shop_lab_bare"
			}
		}
		ids := stormOrders(t, e, schema, run.Start.Run)
		var rows int
		for _, id := range ids {
			rows += e.Count(t, `SELECT count(*) FROM `+schema+`.fulfilments WHERE order_id = $1`, id)
		}
		if len(ids) != orders || run.Out.Facts["orders"] != int64(orders) || run.Out.Facts["fulfilments"] != int64(rows) {
			t.Fatalf("%d orders, %d fulfilments in %s; outcome %+v", len(ids), rows, schema, run.Out.Facts)
		}
		for _, c := range []string{"fulfilment", "mailer"} {
			if got := handled(run.Out.Metrics, c); got != float64(size) {
				t.Errorf("%s handled %v copies, want all %d", c, got, size)
			}
		}
		return run, ids
	}

	// The inbox off, and with it the provider's memory of keys: the
	// copies that reach the provider after it forgot the key are mails of
	// their own. The fulfilment still ships each order once: its lock
	// and state rule stop the copies the inbox no longer does.
	t.Run("InboxOff", func(t *testing.T) {
		run, _ := storm(t, 50, "idempotency")
		f := run.Out.Facts
		if run.Out.OK || f["duplicate_receipts"] == 0 {
			t.Errorf("outcome %q (ok=%t): no duplicate receipt with the inbox off", run.Out.Line, run.Out.OK)
		}
		if f["fulfilments"] != f["orders"] || f["fulfilled_twice"] != 0 {
			t.Errorf("%d fulfilments (%d orders twice), want one each: the lock and the state rule hold without the inbox", f["fulfilments"], f["fulfilled_twice"])
		}
		if n := run.Out.Metrics[stopped("fulfil_order", "idempotency")]; n != 0 {
			t.Errorf("the inbox stopped %v copies, though it was off", n)
		}
	})

	// The inbox alone, in the move's transaction, stops copies that race
	// past a missing lock, version and constraint.
	t.Run("InboxAloneHolds", func(t *testing.T) {
		run, _ := storm(t, 50, "lock", "version", "constraint")
		if !run.Out.OK || run.Out.Metrics[stopped("fulfil_order", "idempotency")] == 0 {
			t.Errorf("outcome %q (ok=%t), inbox stopped %v: want it to hold, by the inbox", run.Out.Line, run.Out.OK,
				run.Out.Metrics[stopped("fulfil_order", "idempotency")])
		}
	})

	// Inbox, lock, version and constraint off: copies that read the order
	// paid at once each pass the state rule, each write the move without
	// a version and each insert a fulfilment no key refuses. Whether two
	// copies of one order overlap so is a race: twenty orders make it
	// all but certain that some do.
	t.Run("OnlyStateRule", func(t *testing.T) {
		const size = 200
		run, ids := storm(t, size, "idempotency", "lock", "version", "constraint")
		f := run.Out.Facts
		if run.Out.OK || f["fulfilled_twice"] == 0 || f["fulfilments"] <= f["orders"] {
			t.Errorf("outcome %q (ok=%t): no order fulfilled twice with only the state rule on", run.Out.Line, run.Out.OK)
		}
		// The rule was on: it stopped every copy that read the order
		// after a fulfilment committed. Those that got through read it
		// paid before.
		if n := run.Out.Metrics[stopped("fulfil_order", "state")]; n == 0 || n+float64(f["fulfilments"]) != size {
			t.Errorf("the state rule stopped %v copies and %d got through, want all %d copies one or the other", n, f["fulfilments"], size)
		}
		for _, id := range ids {
			if n := e.Count(t, `SELECT count(*) FROM shop_lab_bare.orders WHERE id = $1 AND status = 'fulfilled'`, id); n != 1 {
				t.Errorf("order %s is not fulfilled", id)
			}
		}
	})

	if n := len(e.Mailer.Messages("")); n != 0 {
		t.Errorf("the shop's provider sent %d mails for the sandbox's orders", n)
	}
}
