package lab

import (
	"maps"
	"slices"
	"testing"

	"github.com/shop-example/shop/internal/platform/layers"
)

func TestRaceRequest_Validate(t *testing.T) {
	for _, c := range []struct {
		name string
		req  raceRequest
		ok   bool
		set  layers.Set
	}{
		{"Smallest", raceRequest{Scenario: "flash_sale", Size: MinSize}, true, layers.Set{}},
		{"Largest", raceRequest{Scenario: "like_storm", Size: MaxSize}, true, layers.Set{}},
		{"LayersOff", raceRequest{Scenario: "pay_storm", Size: 50, LayersOff: []string{"lock", "constraint"}}, true, layers.Off(layers.Lock, layers.Constraint)},
		{"RedeliveryStorm", raceRequest{Scenario: "redelivery_storm", Size: 50, LayersOff: []string{"idempotency"}}, true, layers.Off(layers.Idempotency)},
		{"RefundStorm", raceRequest{Scenario: "refund_storm", Size: 30, LayersOff: []string{"state", "version", "constraint"}}, true, layers.Off(layers.State, layers.Version, layers.Constraint)},
		{"TooSmall", raceRequest{Scenario: "flash_sale", Size: MinSize - 1}, false, layers.Set{}},
		{"TooBig", raceRequest{Scenario: "flash_sale", Size: MaxSize + 1}, false, layers.Set{}},
		{"UnknownScenario", raceRequest{Scenario: "bank_run", Size: 50}, false, layers.Set{}},
		{"UnknownLayer", raceRequest{Scenario: "flash_sale", Size: 50, LayersOff: []string{"luck"}}, false, layers.Set{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, set, err := c.req.validate()
			if (err == nil) != c.ok || set != c.set {
				t.Errorf("validate(%+v) = %v, %v; want ok=%t, %v", c.req, set, err, c.ok, c.set)
			}
		})
	}
}

// The counters' moves add up over the replicas seen before and after; a
// replica seen only once moved by nothing the lab can know.
func TestDeltas_AddUpReplicas(t *testing.T) {
	const stopped = `shop_conflicts_stopped_total{flow="create_order",layer="version"}`
	before := map[string]map[string]float64{
		"api-1": {stopped: 3},
		"api-2": {stopped: 10},
	}
	after := map[string]map[string]float64{
		"api-1": {stopped: 8},
		"api-2": {stopped: 30, "shop_lock_degraded_total": 1},
		"api-3": {stopped: 99},
	}
	sum, from := deltas(before, after)
	want := map[string]float64{stopped: 25, "shop_lock_degraded_total": 1}
	if !maps.Equal(sum, want) || !slices.Equal(from, []string{"api-1", "api-2"}) {
		t.Errorf("deltas = %v from %v; want %v from api-1, api-2", sum, from, want)
	}
}

// A storm's copies name no replica: the replicas are those whose
// consumers handled them, each with its deliveries, whatever their
// outcome; the other series do not count.
func TestHandledBy_Deliveries(t *testing.T) {
	const (
		processed = `shop_events_consumed_total{consumer="fulfilment",event="order.paid",outcome="processed"}`
		dropped   = `shop_events_consumed_total{consumer="mailer",event="order.paid",outcome="deduplicated"}`
		stopped   = `shop_conflicts_stopped_total{flow="fulfil_order",layer="idempotency"}`
	)
	before := map[string]map[string]float64{
		"api-1": {processed: 1},
		"api-2": {},
	}
	after := map[string]map[string]float64{
		"api-1": {processed: 3, dropped: 7, stopped: 7},
		"api-2": {stopped: 2},
		"api-3": {processed: 9},
	}
	if got, want := handledBy(before, after), map[string]int{"api-1": 9}; !maps.Equal(got, want) {
		t.Errorf("handledBy = %v, want %v", got, want)
	}
}
