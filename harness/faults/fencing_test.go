//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// fencing reads what the paused replica (replica 0) has done about stale
// work: from its metrics port, the conflicts its layers stopped
// (shop_conflicts_stopped_total, by layer) and the leases its watchdog
// found lost; from its log, the same losses and the work its deadlines
// cut short.
func fencing(c *cluster) map[string]float64 {
	out := map[string]float64{}
	scrape(c.replicas[0], func(name, labels string, value float64) {
		switch name {
		case "shop_conflicts_stopped_total":
			out["stopped "+labelValue(labels, "layer")] += value
			out["stopped "+labelValue(labels, "flow")+" "+labelValue(labels, "layer")] += value
		case "shop_lock_acquisitions_total":
			out["lock "+labelValue(labels, "outcome")] += value
		case "shop_lock_extensions_total":
			out["extension "+labelValue(labels, "result")] += value
		}
	})
	log, _ := os.ReadFile(c.replicas[0].logPath)
	out["log outcome unknown"] = float64(bytes.Count(log, []byte(`"msg":"payment outcome unknown`)))
	out["log deadline"] = float64(bytes.Count(log, []byte(`context deadline exceeded`)))
	return out
}

// scrape calls sample with each sample p's metrics port serves; a port
// that does not answer gives none.
func scrape(p *process, sample func(name, labels string, value float64)) {
	res, err := http.Get(p.metricsURL + "/metrics")
	if err != nil {
		return
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		sample(parseSample(sc.Text()))
	}
}

// parseSample splits a line of the Prometheus text format.
func parseSample(line string) (name, labels string, value float64) {
	if strings.HasPrefix(line, "#") {
		return "", "", 0
	}
	series, v, ok := strings.Cut(line, " ")
	if !ok {
		return "", "", 0
	}
	value, _ = strconv.ParseFloat(v, 64)
	name, labels, _ = strings.Cut(series, "{")
	return name, labels, value
}

func labelValue(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// reportFencing says what the paused replica did with the work it had in
// hand once resumed (it got no new requests after): the stale writes its
// layers refused, by layer, the leases it found lost, and the work its
// deadlines cut short before it could write.
func reportFencing(t *testing.T, c *cluster, healed, end map[string]float64) string {
	delta := func(k string) float64 { return end[k] - healed[k] }
	var parts []string
	for _, layer := range []string{"version", "state", "constraint", "lock", "idempotency"} {
		if d := delta("stopped " + layer); d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", layer, d))
		}
	}
	refused := strings.Join(parts, ", ")
	if refused == "" {
		refused = "none"
	}
	// The stale requests: those sent straight to replica 0 that were in
	// hand when it stopped, answered after it resumed.
	var held []answer
	if c.stale != nil {
		for _, a := range c.stale.snapshot() {
			if a.at.After(c.stalePausedAt) {
				held = append(held, a)
			}
		}
	}
	staleAnswers := "none"
	if len(held) > 0 {
		var parts []string
		for flow, m := range tally(held) {
			parts = append(parts, flow+": "+formatTally(m))
		}
		sort.Strings(parts)
		staleAnswers = strings.Join(parts, "; ")
	}
	s := fmt.Sprintf("after the resume, the paused replica's stale writes refused by layer: %s (by the version check: %.0f); "+
		"leases found lost: %.0f (extensions failed %.0f); payments left to the reconciler (outcome unknown): %.0f; "+
		"log lines with a deadline exceeded: %.0f; the requests it held when stopped were answered, after the resume: %s",
		refused, delta("stopped version"), delta("lock lost"), delta("extension failed"),
		delta("log outcome unknown"), delta("log deadline"), staleAnswers)
	t.Log(s)
	return s
}

// counters reads, from each replica's metrics port, the conflicts its
// layers stopped (by layer) and how its locks went: taken, busy, run
// without the lock (degraded), refused (unavailable), lost.
func counters(p *process) map[string]float64 {
	out := map[string]float64{}
	scrape(p, func(name, labels string, value float64) {
		switch name {
		case "shop_conflicts_stopped_total":
			out[labelValue(labels, "layer")] += value
		case "shop_lock_acquisitions_total":
			out["lock "+labelValue(labels, "outcome")] += value
		case "shop_lock_degraded_total":
			out["lock degraded"] += value
		}
	})
	eventCounts(p, out)
	refundCounts(p, out)
	return out
}

// snapshotCounters reads counters of every replica running now.
func snapshotCounters(c *cluster) map[*process]map[string]float64 {
	out := map[*process]map[string]float64{}
	for _, p := range c.replicas {
		out[p] = counters(p)
	}
	return out
}

// counterDelta is what the replicas counted between two snapshots; a
// replica started in between counts from zero. A replica killed in
// between took its counts with it.
func counterDelta(from, to map[*process]map[string]float64) string {
	sum := counterSums(from, to)
	var parts []string
	for _, k := range []string{"idempotency", "lock", "state", "version", "constraint"} {
		if sum[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, sum[k]))
		}
	}
	stopped := strings.Join(parts, ", ")
	if stopped == "" {
		stopped = "none"
	}
	return fmt.Sprintf("conflicts stopped: %s; locks taken %.0f, busy %.0f, lost %.0f, run without the lock %.0f, refused (strict) %.0f",
		stopped, sum["lock acquired"], sum["lock busy"], sum["lock lost"], sum["lock degraded"],
		sum["lock unavailable"]-sum["lock degraded"])
}

// counterSums adds up, over the replicas, what they counted between two
// snapshots (counters' keys).
func counterSums(from, to map[*process]map[string]float64) map[string]float64 {
	sum := map[string]float64{}
	for p, end := range to {
		for k, v := range end {
			sum[k] += v - from[p][k]
		}
	}
	return sum
}
