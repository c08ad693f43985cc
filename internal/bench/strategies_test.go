package bench

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/platform/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestStrategies_AuditSeesTheRaces runs the shoot-out's hot cases at a
// tiny size and checks its correctness column: the naive strategies (and
// the unsafe one-commit payment) leave anomalies the audit counts, the
// layered flow none. If an audit stopped seeing a race, or a baseline
// stopped racing, the table would silently call a broken guard correct.
func TestStrategies_AuditSeesTheRaces(t *testing.T) {
	run := func(flows, strategies string) []cellResult {
		t.Helper()
		o, err := parseBenchFlags("strategies", []string{
			"-db", testenv.DatabaseURL(t), "-redis", strings.Join(testenv.RedisAddrs(t), ","),
			"-clients", "8", "-duration", "700ms", "-warmup", "300ms", "-cases", "hot",
			"-flows", flows, "-strategies", strategies,
		})
		if err != nil {
			t.Fatal(err)
		}
		results, _, err := runStrategies(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return results
	}
	wantAnomalies := map[string]bool{
		"orders/naive": true, "orders/conditional": false, "orders/layered": false,
		"payments/naive": true, "payments/conditional": true, "payments/layered": false,
		"seats/naive": true, "seats/conditional": false, "seats/layered": false,
		"likes/naive": true, "likes/conditional": false, "likes/layered": false,
	}
	results := run("orders,payments,seats,likes", "naive,conditional,layered")
	seen := map[string]bool{}
	for _, r := range results {
		name := r.flow + "/" + r.strategy
		want, ok := wantAnomalies[name]
		if !ok {
			t.Errorf("unexpected cell %s/%s", name, r.shape)
			continue
		}
		seen[name] = true
		// On a loaded machine 700 ms of 8 clients can miss the race window,
		// or see no operation end inside it at all (each first one opens
		// connections). Such a cell gets up to two more runs to show what
		// it must. An anomaly in any run of a cell that must hold fails it.
		ops, anomalies, errs := r.orders, r.anomalies, r.errorSummary()
		for again := 0; (ops == 0 || want && anomalies == 0) && again < 2; again++ {
			for _, rr := range run(r.flow, r.strategy) {
				ops, anomalies = ops+rr.orders, anomalies+rr.anomalies
				errs += "; then " + rr.errorSummary()
			}
		}
		if ops == 0 {
			t.Errorf("%s/%s: no operation succeeded in three runs (errors: %s)", name, r.shape, errs)
		}
		if got := anomalies > 0; got != want {
			t.Errorf("%s/%s: %d anomalies; want some: %v", name, r.shape, anomalies, want)
		}
	}
	for name := range wantAnomalies {
		if !seen[name] {
			t.Errorf("%s/hot did not run", name)
		}
	}
	// The chart of what ran, with strategies missing and one that does not
	// apply, must still draw.
	results = append(results, cellResult{flow: "likes", strategy: "unique only", shape: hot, na: "why"})
	if err := writeChart(filepath.Join(t.TempDir(), "chart.svg"), results); err != nil {
		t.Fatal(err)
	}
}
