package bench

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
)

// TestOutside_SmallRun runs `shop bench outside` at a tiny size: two
// replicas of a freshly built shop, seeded through the API, every flow in
// both cases. Every cell made progress, no audit found a violation, the
// requests were shared between the replicas, and the replicas took their
// locks (none degraded to running without Redis): the table's figures are
// those of the whole flow on both.
func TestOutside_SmallRun(t *testing.T) {
	dbURL, redis := testenv.DatabaseURL(t), testenv.RedisAddrs(t)
	o, err := parseBenchFlags("outside", []string{
		"-db", dbURL, "-redis", strings.Join(redis, ","), "-shop", testenv.ShopBinary(t),
		"-clients", "4", "-duration", "300ms", "-warmup", "100ms",
		"-skus", "4", "-posts", "4", "-seat-rows", "1", "-pay-rate", "200",
	})
	if err != nil {
		t.Fatal(err)
	}
	o.minOps = 5
	run, err := runOutside(context.Background(), o, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range run.rows {
		name := r.flow + "/" + r.shape
		seen[name] = true
		if r.done == 0 {
			t.Errorf("%s: no operation succeeded (errors: %s)", name, r.errorSummary())
		}
		if r.anomalies() > 0 {
			t.Errorf("%s: the audit found %d %s in flight, %d after", name, r.inFlight, r.counts, r.after)
		}
	}
	for _, name := range outsideRowNames(outsideFlowNames(), []string{hot, spread}) {
		if !seen[name] {
			t.Errorf("%s did not run", name)
		}
	}
	if len(run.served) != outsideReplicas {
		t.Fatalf("requests answered by %d replicas, want %d", len(run.served), outsideReplicas)
	}
	total := run.served[0] + run.served[1]
	for i, n := range run.served {
		if 10*n < 4*total {
			t.Errorf("%s answered %d of %d requests: the client does not alternate", replicaName(i), n, total)
		}
	}
	for _, want := range []string{"degraded=0", "unlock_errors=0"} {
		if !strings.Contains(run.locks, want) {
			t.Errorf("service lock: %s; want %s", run.locks, want)
		}
	}
	if strings.Contains(run.locks, "acquired=0") || !strings.Contains(run.locks, "acquired=") {
		t.Errorf("service lock: %s; want locks acquired", run.locks)
	}
}

// TestAlternate_RoundRobin: each request goes to the next replica, its
// Host header with it.
func TestAlternate_RoundRobin(t *testing.T) {
	var hosts []string
	a := &alternate{hosts: []string{"127.0.0.1:1", "127.0.0.1:2"}, next: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		hosts = append(hosts, r.URL.Host+"|"+r.Host)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}
	for range 4 {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/v1/me", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	want := "127.0.0.1:1|127.0.0.1:1 127.0.0.1:2|127.0.0.1:2 127.0.0.1:1|127.0.0.1:1 127.0.0.1:2|127.0.0.1:2"
	if got := strings.Join(hosts, " "); got != want {
		t.Errorf("sent to %s, want %s", got, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
