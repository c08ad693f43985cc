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

// TestStrategies_AuditSeesTheRaces runs every cell of the shoot-out, hot
// and spread, at a tiny size, and checks its correctness columns: the
// blind strategies leave anomalies that the in-flight audit sees, every
// other strategy none, and every cell made progress. If an audit stopped
// seeing a race, or a baseline stopped racing, the table would silently
// call a broken guard correct; a cell where every operation was refused
// would call a guard correct that did nothing.
//
// The spread cases are made to collide here (a few SKUs and posts, one
// row of seats), so that the naive strategies race in both cases; the
// spread payments pay each order once, so no strategy can double charge
// there. The clients start together and each runs at least minOps
// operations, however loaded the machine: enough for the blind ones to
// race in every run.
func TestStrategies_AuditSeesTheRaces(t *testing.T) {
	const minOps = 10
	o, err := parseBenchFlags("strategies", []string{
		"-db", testenv.DatabaseURL(t), "-redis", strings.Join(testenv.RedisAddrs(t), ","),
		"-clients", "8", "-duration", "200ms", "-warmup", "0s",
		"-skus", "4", "-posts", "4", "-seat-rows", "1", "-clicks", "4",
	})
	if err != nil {
		t.Fatal(err)
	}
	o.minOps = minOps
	results, _, err := runStrategies(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	mustBreak := map[string]bool{
		"orders/naive/hot": true, "orders/naive/spread": true,
		"payments/naive/hot": true, "payments/conditional/hot": true,
		"seats/naive/hot": true, "seats/naive/spread": true,
		"likes/naive/hot": true, "likes/naive/spread": true,
	}
	seen := map[string]bool{}
	for _, r := range results {
		name := r.flow + "/" + r.strategy + "/" + r.shape
		seen[name] = true
		switch {
		case r.na != "":
		case r.succeeded == 0:
			t.Errorf("%s: no operation succeeded in %d (errors: %s)", name, o.clients*minOps, r.errorSummary())
		case mustBreak[name] && r.inFlight == 0:
			t.Errorf("%s: the in-flight audit saw no anomaly (%d after, %d operations succeeded, errors: %s); want some",
				name, r.after, r.succeeded, r.errorSummary())
		case !mustBreak[name] && r.anomalies > 0:
			t.Errorf("%s: %d anomalies in flight, %d after; want none", name, r.inFlight, r.after)
		}
	}
	for _, f := range strategyFlows() {
		for _, shape := range []string{hot, spread} {
			for _, s := range strategyNames {
				if _, ok := f.strategies[s]; ok && !seen[f.name+"/"+s+"/"+shape] {
					t.Errorf("%s/%s/%s did not run", f.name, s, shape)
				}
			}
		}
	}
	// The chart of what ran, with a strategy that does not apply, must
	// still draw.
	if err := writeChart(filepath.Join(t.TempDir(), "chart.svg"), results); err != nil {
		t.Fatal(err)
	}
}
