package lab

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// shown are the metric families the lab reports: which layer stopped each
// conflict, what the locks did, and what the consumers made of the
// events delivered to them.
var shown = map[string]bool{
	"shop_conflicts_stopped_total":  true,
	"shop_events_consumed_total":    true,
	"shop_events_retried_total":     true,
	MailReplayed:                    true,
	"shop_lock_acquisitions_total":  true,
	"shop_lock_degraded_total":      true,
	"shop_lock_extensions_total":    true,
	"shop_lock_unlock_errors_total": true,
	"shop_lock_wait_seconds":        true,
	"shop_lock_tries":               true,
}

// gather reads the shown families of m as flat series, "name{k=v,…}" →
// value; a histogram gives its _count and _sum.
func gather(m *metrics.Metrics) (map[string]float64, error) {
	out := map[string]float64{}
	if m == nil {
		return out, nil
	}
	families, err := m.Registry.Gather()
	if err != nil {
		return nil, err
	}
	for _, f := range families {
		if !shown[f.GetName()] {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := seriesLabels(s.GetLabel())
			switch {
			case s.GetCounter() != nil:
				out[f.GetName()+labels] = s.GetCounter().GetValue()
			case s.GetHistogram() != nil:
				out[f.GetName()+"_count"+labels] = float64(s.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+labels] = s.GetHistogram().GetSampleSum()
			case s.GetGauge() != nil:
				out[f.GetName()+labels] = s.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

func seriesLabels(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.GetName() + "=" + strconv.Quote(l.GetValue())
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// delta returns the series that moved from before to after, by how much.
func delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// snapshot reads the counters of every replica behind the target: each
// replica counts its own, and a race through the load balancer moves
// them all. The lab asks the target's GET /v1/lab/stats until two answers
// in a row come from replicas it has already seen (a round-robin
// balancer has then shown them all), at most maxStatsCalls times, without
// the live copy's route: the lab answers them, with its live copy's
// counters. A sandbox is one copy in this process: its registry is read
// directly.
func (r *run) snapshot(ctx context.Context) (map[string]map[string]float64, error) {
	if r.target.Name != "live" {
		m, err := gather(r.target.Metrics)
		return map[string]map[string]float64{r.target.Name: m}, err
	}
	out := map[string]map[string]float64{}
	seen := 0
	public := &run{lab: r.lab, target: Target{URL: r.target.URL}}
	for range maxStatsCalls {
		var doc statsDoc
		if err := public.callJSON(ctx, request{method: http.MethodGet, path: "/v1/lab/stats"}, &doc); err != nil {
			break
		}
		if _, ok := out[doc.Replica]; ok {
			if seen++; seen == 2 {
				break
			}
			continue
		}
		seen = 0
		out[doc.Replica] = doc.Metrics
	}
	if len(out) == 0 {
		// The target cannot be asked (no lab behind it): this replica's
		// own counters are all there is.
		m, err := gather(r.target.Metrics)
		return map[string]map[string]float64{r.lab.cfg.Replica: m}, err
	}
	return out, nil
}

const maxStatsCalls = 12

// deltas adds up the moves of every replica seen both before and after.
func deltas(before, after map[string]map[string]float64) (map[string]float64, []string) {
	sum := map[string]float64{}
	var from []string
	for replica, a := range after {
		b, ok := before[replica]
		if !ok {
			continue
		}
		from = append(from, replica)
		for k, d := range delta(b, a) {
			sum[k] += d
		}
	}
	slices.Sort(from)
	return sum, from
}

// handledBy counts, for each replica seen before and after, the
// deliveries its consumers handled in between, whatever their outcome.
func handledBy(before, after map[string]map[string]float64) map[string]int {
	out := map[string]int{}
	for replica, a := range after {
		b, ok := before[replica]
		if !ok {
			continue
		}
		n := 0.0
		for k, d := range delta(b, a) {
			if strings.HasPrefix(k, "shop_events_consumed_total{") {
				n += d
			}
		}
		if n > 0 {
			out[replica] = int(n)
		}
	}
	return out
}
