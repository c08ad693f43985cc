//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// fencing reads, from the paused replica (replica 0), the conflicts its
// layers stopped (shop_conflicts_stopped_total, by layer, pay flow and
// all flows) from its metrics port, and the leases it lost from its log.
func fencing(c *cluster) map[string]float64 {
	out := map[string]float64{}
	res, err := http.Get(c.replicas[0].metricsURL + "/metrics")
	if err == nil {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "shop_conflicts_stopped_total{") {
				continue
			}
			labels, value, _ := strings.Cut(strings.TrimPrefix(line, "shop_conflicts_stopped_total"), " ")
			v, _ := strconv.ParseFloat(value, 64)
			layer := labelValue(labels, "layer")
			out["stopped "+layer] += v
			if labelValue(labels, "flow") == "pay_order" {
				out["pay stopped "+layer] += v
			}
		}
	}
	log, _ := os.ReadFile(c.replicas[0].logPath)
	out["lock lost"] = float64(bytes.Count(log, []byte("lock lost")))
	return out
}

func labelValue(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// expectFencing reports the stale writes refused after the resume: the
// conflicts the paused replica's layers stopped during the scenario, by
// layer, and the leases its watchdog found lost.
func expectFencing(t *testing.T, before, after map[string]float64) string {
	delta := func(k string) float64 { return after[k] - before[k] }
	var parts []string
	for _, layer := range []string{"version", "state", "constraint", "lock", "idempotency"} {
		if d := delta("pay stopped " + layer); d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", layer, d))
		}
	}
	refused := strings.Join(parts, ", ")
	if refused == "" {
		refused = "none"
	}
	t.Logf("paused replica: pay conflicts stopped after the resume by layer: %s; lock lost in its log: %.0f",
		refused, delta("lock lost"))
	return fmt.Sprintf("paused replica's stale writes refused (pay, by layer): %s; leases lost: %.0f (version refusals: %.0f)",
		refused, delta("lock lost"), delta("pay stopped version"))
}
