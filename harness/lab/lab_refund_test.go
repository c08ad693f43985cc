package lab_test

import (
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
)

// refundFacts are what a schema and a gateway hold of a refund storm's
// orders, counted as the lab's outcome counts them.
type refundFacts struct {
	orders, atProcessor, recorded, given, captured int64
}

// refundStormFacts reads the orders of run in schema, their refunds there
// and their charges at the gateway gatewayURL.
func refundStormFacts(t *testing.T, e *apptest.Env, schema, gatewayURL, run string) refundFacts {
	t.Helper()
	var f refundFacts
	for _, id := range stormOrders(t, e, schema, run) {
		f.orders++
		f.recorded += int64(e.Count(t, `SELECT count(*) FROM `+schema+`.refunds WHERE order_id = $1 AND status = 'succeeded'`, id))
		var charges struct {
			Items []struct {
				AmountCents int64 `json:"amount_cents"`
				Refunds     []struct {
					AmountCents int64 `json:"amount_cents"`
				} `json:"refunds"`
			} `json:"items"`
		}
		getJSON(t, gatewayURL+"/v1/charges?reference="+id, &charges)
		for _, c := range charges.Items {
			f.captured += c.AmountCents
			for _, r := range c.Refunds {
				f.atProcessor++
				f.given += r.AmountCents
			}
		}
	}
	return f
}

// TestLab_RefundStormLive: with every layer on, ten agents on each of
// three paid orders refund 60 % of it at once, through the balancer to
// both replicas' live copies. One refund per order goes through; the
// other agents are refused refund_exceeds_remaining, each by the refund
// rule (the state layer's counter) behind the order's lock. The outcome
// is what the live copy's tables and the lab's gateway hold, and the real
// shop never sees a refund.
func TestLab_RefundStormLive(t *testing.T) {
	s := apptest.StartWith(t, 2, apptest.StackOptions{Vars: map[string]string{"SHOP_DEMO": "true"},
		Names: []string{"api-1", "api-2"}, LabGateway: true})
	e := s.Env
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	before := shopRows(t, e)

	const size, orders = 30, 3
	run := startRace(t, e.R(0), u.Token, map[string]any{"scenario": "refund_storm", "size": size})
	t.Logf("%s; %v", run.Out.Line, run.Out.Metrics)
	if run.Start.Target != "live" || !run.Out.OK {
		t.Fatalf("start %+v, outcome %+v; want a live run that holds", run.Start, run.Out)
	}
	if r := run.Out.Replicas; len(r) != 2 {
		t.Errorf("answers from %v, want both replicas", r)
	}

	f := refundStormFacts(t, e, "shop_lab_live", s.LabGatewayURL, run.Start.Run)
	out := run.Out.Facts
	if f.orders != orders || f.atProcessor != orders || f.recorded != orders || f.given != orders*6000 || f.captured != orders*10000 {
		t.Errorf("the live copy and the lab's gateway hold %+v; want %d orders of 10000, each given back 6000 once", f, orders)
	}
	if out["orders"] != f.orders || out["refunds_at_processor"] != f.atProcessor || out["refunds_recorded"] != f.recorded ||
		out["refunded_cents"] != f.given || out["captured_cents"] != f.captured || out["over_refunded_cents"] != 0 {
		t.Errorf("outcome %v; the copy and its gateway hold %+v", out, f)
	}

	// Work shown, and who stopped the rest: the refund rule, once per
	// agent refused.
	refused := run.Out.Tally["422 refund_exceeds_remaining"]
	if run.Out.Tally["201"] != orders || refused != size-orders {
		t.Errorf("tally %v; want %d × 201 and %d × 422 refund_exceeds_remaining", run.Out.Tally, orders, size-orders)
	}
	if n := run.Out.Metrics[stopped("refund_order", "state")]; n != float64(refused) {
		t.Errorf("the refund rule stopped %v agents; %d were refused", n, refused)
	}

	for what, n := range shopRows(t, e) {
		if n != before[what] {
			t.Errorf("the real shop's %s went from %d to %d", what, before[what], n)
		}
	}
}

// TestLab_RefundStormSandbox: the same storm in a sandbox, whose
// processor refunds whatever it is asked. With the refund rule, the
// version check and the constraints off, every agent's 60 % goes through
// and the outcome counts what was given back beyond what was captured;
// with only the lock off, the version check and the rule hold.
func TestLab_RefundStormSandbox(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_DEMO": "true"})
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	storm := func(t *testing.T, size int, schema string, off ...string) (race, refundFacts) {
		t.Helper()
		e.Clock.Advance(2 * time.Second) // a second between two runs
		run := startRace(t, e.R(0), u.Token, map[string]any{"scenario": "refund_storm", "size": size, "layers_off": off})
		t.Logf("%v off: %s; %v", off, run.Out.Line, run.Out.Metrics)
		if run.Start.Target != "sandbox" {
			t.Fatalf("start %+v: want the sandbox", run.Start)
		}
		// The sandbox's gateway is gone with the sandbox: its audit is
		// the outcome's, held against the sandbox's tables.
		var recorded int64
		for _, id := range stormOrders(t, e, schema, run.Start.Run) {
			recorded += int64(e.Count(t, `SELECT count(*) FROM `+schema+`.refunds WHERE order_id = $1 AND status = 'succeeded'`, id))
		}
		if run.Out.Facts["refunds_recorded"] != recorded || run.Out.Facts["orders"] != int64(size/10) {
			t.Fatalf("outcome %v; %s holds %d refunds succeeded", run.Out.Facts, schema, recorded)
		}
		return run, refundFacts{orders: run.Out.Facts["orders"], atProcessor: run.Out.Facts["refunds_at_processor"],
			recorded: recorded, given: run.Out.Facts["refunded_cents"], captured: run.Out.Facts["captured_cents"]}
	}

	// No rule, no version check, no CHECK: the lock serialises the
	// agents, but nothing refuses one; each 60 % is held and given back.
	t.Run("NoRuleNoCheck", func(t *testing.T) {
		const size = 20
		run, f := storm(t, size, "shop_lab_bare", "state", "version", "constraint")
		over := int64(size*6000 - size/10*10000)
		if run.Out.OK || f.atProcessor != size || f.recorded != size || run.Out.Facts["over_refunded_cents"] != over {
			t.Errorf("outcome %q (ok=%t), %+v; want all %d refunds made and %d cents given back beyond what was captured",
				run.Out.Line, run.Out.OK, f, size, over)
		}
		if run.Out.Tally["201"] != size {
			t.Errorf("tally %v, want %d × 201", run.Out.Tally, size)
		}
	})

	// Without the lock, agents read the order side by side; the one whose
	// write finds the version it read holds its 60 %, and the rule refuses
	// the others when they read again.
	t.Run("LockOffHolds", func(t *testing.T) {
		const size = 20
		run, f := storm(t, size, "shop_lab", "lock")
		if !run.Out.OK || f.atProcessor != size/10 || f.given != size/10*6000 {
			t.Errorf("outcome %q (ok=%t), %+v; want one 60 %% refund per order", run.Out.Line, run.Out.OK, f)
		}
		if n := run.Out.Metrics[stopped("refund_order", "state")]; n == 0 {
			t.Errorf("the refund rule stopped no agent: %v", run.Out.Metrics)
		}
	})

	if n := e.Count(t, `SELECT count(*) FROM public.refunds`); n != 0 {
		t.Errorf("the real shop holds %d refunds after sandbox runs", n)
	}
}
