package bench

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestStrategies_AuditSeesTheRaces runs every cell of the shoot-out, hot
// and spread, at a tiny size, once through HTTP and once in process, and
// checks each run's correctness columns: the blind strategies leave
// anomalies that the in-flight audit sees, through the bench's router as
// in process; every other strategy none; and every run made progress and
// counted its work. If an audit stopped seeing a race, or a baseline
// stopped racing in either column, the table would silently call a
// broken guard correct; a run where every operation was refused would
// call a guard correct that did nothing.
//
// The spread cases are made to collide here (a few SKUs and posts, one
// row of seats), so that the naive strategies race in both cases; the
// spread payments pay each order once, so no strategy can double charge
// there, and the spread refunds refund each order once, so none can give
// back more than was captured. Every flow runs, those -flows leaves out
// by default too. The clients start together and each runs at least minOps
// operations, however loaded the machine: enough for the blind ones to
// race in every run.
func TestStrategies_AuditSeesTheRaces(t *testing.T) {
	const minOps = 10
	o, err := parseBenchFlags("strategies", []string{
		"-db", testenv.DatabaseURL(t), "-redis", strings.Join(testenv.RedisAddrs(t), ","),
		"-clients", "8", "-duration", "200ms", "-warmup", "0s", "-runs", "1",
		"-skus", "4", "-posts", "4", "-seat-rows", "1", "-clicks", "4",
		"-flows", strings.Join(strategyFlowNames(), ","),
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
		"refunds/naive/hot": true, "refunds/conditional/hot": true,
	}
	seen := map[string]bool{}
	for _, r := range results {
		name := r.flow + "/" + r.strategy + "/" + r.shape
		seen[name] = true
		if r.na != "" {
			continue
		}
		columns := []struct {
			name string
			runs []cellRun
		}{{viaHTTP, r.http}, {inProcess, r.floor}}
		if r.strategy == "layered" && len(r.floor) > 0 {
			t.Errorf("%s: %d runs in process; the layered flow has none", name, len(r.floor))
		}
		for _, col := range columns {
			if r.strategy == "layered" && col.name == inProcess {
				continue
			}
			if len(col.runs) != 1 {
				t.Errorf("%s (%s): %d runs, want 1", name, col.name, len(col.runs))
			}
			for _, run := range col.runs {
				switch {
				case run.succeeded == 0:
					t.Errorf("%s (%s): no operation succeeded in %d (errors: %s)", name, col.name, o.clients*minOps, run.errorSummary())
				case mustBreak[name] && run.found.inFlight == 0:
					t.Errorf("%s (%s): the in-flight audit saw no anomaly (%d after, %d operations succeeded, errors: %s); want some",
						name, col.name, run.found.after, run.succeeded, run.errorSummary())
				case !mustBreak[name] && run.found.anomalies() > 0:
					t.Errorf("%s (%s): %d anomalies in flight, %d after; want none", name, col.name, run.found.inFlight, run.found.after)
				}
				// Every operation makes a round trip to PostgreSQL and
				// takes CPU time; the window counts them.
				if p := run.used.perOp(run.ops()); run.ops() > 0 && (p.trips < 1 || p.process <= 0) {
					t.Errorf("%s (%s): %.1f round trips and %s of CPU per operation over %d operations; want some of each",
						name, col.name, p.trips, p.process, run.ops())
				}
			}
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
