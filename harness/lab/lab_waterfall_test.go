package lab_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/lab"
)

// TestLab_Waterfall: after a race, the lab draws its waterfall from the
// spans the copies that served it kept: a live race's from both
// replicas' live copies, through the balancer; a sandbox's from the
// sandbox. One row per request, each with the status and the replica its
// answer had, a replay where the answer was one, and the layer that
// stopped it where the answer says one did: a flash sale's buyer turned
// away with out_of_stock by the conditional decrement (the version
// layer), a payment refused with invalid_state by the state rule, one
// turned away with resource_busy by the lock or by the state rule (the
// order read was paying already): a row names the lock exactly when its
// lock's wait ended busy. The pay storm's winner has the call to the card
// processor below it, and with the lock on the lock's wait and hold.
// Without the lock, in a sandbox, the losers' rows show the writes the
// version check refused (logged: the race decides how many).
func TestLab_Waterfall(t *testing.T) {
	s := apptest.StartWith(t, 2, apptest.StackOptions{Vars: map[string]string{"SHOP_DEMO": "true"}, LabGateway: true,
		Names: []string{"api-1", "api-2"}})
	e := s.Env
	u := apptest.MustCreateUser(t, e.R(0), "lab visitor")
	for i, c := range []struct {
		name     string
		scenario string
		size     int
		off      []string
		replicas []string
	}{
		{"PayStormLive", "pay_storm", 30, nil, []string{"api-1", "api-2"}},
		{"FlashSaleLive", "flash_sale", 20, nil, []string{"api-1", "api-2"}},
		{"FlashSaleSandbox", "flash_sale", 10, []string{"version"}, []string{"sandbox"}},
		{"PayStormNoLock", "pay_storm", 30, []string{"lock"}, []string{"sandbox"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.Clock.Advance(2 * time.Second) // one run at a time per replica, a second apart
			body := map[string]any{"scenario": c.scenario, "size": c.size}
			if c.off != nil {
				body["layers_off"] = c.off
			}
			run := startRace(t, e.R(i), u.Token, body)
			w := run.Waterfall
			if w == nil {
				t.Fatal("no waterfall after the race")
			}
			if w.Requests != c.size || len(w.Rows) != c.size {
				t.Fatalf("waterfall of %d requests has %d rows (%d spans), want %d", w.Requests, len(w.Rows), w.Spans, c.size)
			}
			rowOf := map[int]lab.Row{}
			var replicas []string
			for _, r := range w.Rows {
				rowOf[r.I] = r
				if !slices.Contains(replicas, r.Replica) {
					replicas = append(replicas, r.Replica)
				}
			}
			slices.Sort(replicas)
			if !slices.Equal(replicas, c.replicas) {
				t.Errorf("rows on the replicas %v, want %v", replicas, c.replicas)
			}
			layers := map[string]int{}
			for _, a := range run.Answers {
				r, ok := rowOf[a.I]
				if !ok {
					t.Errorf("answer %d has no row", a.I)
					continue
				}
				layers[r.Layer]++
				if r.Status != a.Status || r.Replica != a.Replica || r.Replayed != a.Replayed {
					t.Errorf("request %d: row %d on %s (replayed %t), answer %d on %s (replayed %t)",
						a.I, r.Status, r.Replica, r.Replayed, a.Status, a.Replica, a.Replayed)
				}
				if want := layersOfAnswer(a); !slices.Contains(want, r.Layer) {
					t.Errorf("request %d answered %d %s: its row names the layer %q, want one of %q", a.I, a.Status, a.Code, r.Layer, want)
				}
				busy := slices.ContainsFunc(r.Bars, func(b lab.Bar) bool { return b.Kind == "lock.wait" && b.Result == "busy" })
				if busy != (r.Layer == "lock") {
					t.Errorf("request %d: stopped by %q, a busy lock.wait %t: %+v", a.I, r.Layer, busy, r.Bars)
				}
				if a.Code == "out_of_stock" && !r.LostAtVersion {
					t.Errorf("request %d, turned away by the conditional decrement, is not marked lost at the version check", a.I)
				}
				if c.scenario == "pay_storm" && a.Status == http.StatusCreated {
					kinds := []string{"idempotency", "gateway", "db.tx"}
					if c.off == nil {
						kinds = append(kinds, "lock.wait", "lock.hold")
					}
					for _, kind := range kinds {
						if !slices.ContainsFunc(r.Bars, func(b lab.Bar) bool { return b.Kind == kind }) {
							t.Errorf("the winner's row has no %s bar: %+v", kind, r.Bars)
						}
					}
				}
			}
			for i, r := range w.Rows[1:] {
				if r.StartMS < w.Rows[i].StartMS {
					t.Errorf("row %d starts at %v ms, before the row above it (%v ms)", i+1, r.StartMS, w.Rows[i].StartMS)
				}
			}
			lost, waited := 0, 0
			for _, r := range w.Rows {
				if r.LostAtVersion {
					lost++
				}
				if r.Waited {
					waited++
				}
			}
			t.Logf("%s: %d rows, %d spans, %.1f ms; layers named %v; lost at version %d, waited %d; tally %v; outcome %s", c.name, len(w.Rows), w.Spans, w.MS, layers, lost, waited, run.Out.Tally, run.Out.Line)
		})
	}
}

// layersOfAnswer are the layers that may have stopped a request answered
// a: what its row may name. resource_busy is the lock's, or the state
// rule's when the order read is paying already (payments.Service.admit):
// the answer does not say which, the row does.
func layersOfAnswer(a labAnswer) []string {
	switch {
	case a.Replayed:
		return []string{"idempotency"}
	case a.Code == "resource_busy":
		return []string{"lock", "state"}
	case a.Code == "invalid_state":
		return []string{"state"}
	case a.Code == "out_of_stock":
		return []string{"version"}
	}
	return []string{""}
}
