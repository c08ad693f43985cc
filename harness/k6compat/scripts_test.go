package k6compat_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/k6compat"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// seatsLanded says whether the service serves the seats flow
// (/v1/events, holds, bookings); it does since internal/seats. Were it
// false, seat-rush.js would be skipped and smoke.js and mixed.js run
// with SEATS=0.
const seatsLanded = true

// scriptLimits keep each script to a few VUs and iterations: this checks
// that the scripts run against the API and their invariants hold, on a
// shared two-core machine; it measures nothing.
var scriptLimits = k6compat.Limits{VUs: 4, Iterations: 12, Duration: 8 * time.Second, GracefulStop: 10 * time.Second}

// The sizes each script gets: as many users as VUs, little stock, short
// waits; and its latency bounds (P95_MS, P99_MS for mixed.js), in ms.
//
// The bounds are 5× the highest p95 (p99) of three runs of TestScripts
// with -race on the two-core machine while other test runs loaded it
// (load average 8–17), rounded up to 100 ms, and at least 500 ms:
// flash-sale orders.create 198 ms, pay-storm payments.create 225 ms,
// seat-rush holds.create 167 ms, like-storm posts.like 87 ms, mixed 96 ms
// at p95 and 112 ms at p99 over its endpoints (the runs' spread was up to
// 2.5×); refund-storm refunds.create 294 ms (load average 11–15). A
// request that waits out a lock's budget or a gateway timeout (a second
// or more) crosses them.
var scripts = []struct {
	name  string
	seats bool // needs the seats flow
	env   map[string]string
}{
	{"flash-sale", false, map[string]string{"BUYERS": "4", "STOCK": "2", "CLICKS": "3", "P95_MS": "1000"}},
	{"pay-storm", false, map[string]string{"PAYERS": "3", "ORDERS": "4", "P95_MS": "1200"}},
	{"seat-rush", true, map[string]string{"FANS": "4", "ROWS": "2", "SEATS_PER_ROW": "4", "TRIES": "3", "P95_MS": "900"}},
	{"like-storm", false, map[string]string{"LIKERS": "4", "TOGGLES": "3", "P95_MS": "500"}},
	{"refund-storm", false, map[string]string{"AGENTS": "4", "SHARE": "2", "ROUNDS": "3", "SETTLE_WAIT": "20", "P95_MS": "1500"}},
	{"mixed", false, map[string]string{"USERS": "4", "DURATION": "4s", "RATE": "4", "P95_MS": "500", "P99_MS": "600"}},
	{"smoke", false, nil},
}

// TestScripts runs every script of loadtest/k6 against a real stack (two
// replicas, the gateway, PostgreSQL, Redis; rate limits off) and fails if
// a script throws, a check fails beyond what the script allows, a
// threshold is crossed or a teardown invariant fails.
func TestScripts(t *testing.T) {
	dir := scriptsDir(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Every script in the folder has a case here, so a new one is run too.
	known := map[string]bool{}
	for _, s := range scripts {
		known[s.name+".js"] = true
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".js") && !known[e.Name()] {
			t.Errorf("%s has no case in TestScripts", e.Name())
		}
	}

	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			stack := apptest.Start(t, 2, nil)
			env := map[string]string{
				"BASE_URL": stack.BaseURL, "GATEWAY_URL": stack.GatewayURL, "ADMIN_TOKEN": apptest.AdminToken,
				"THINK": "0.01", "RETRY_WAIT_MAX": "0.05", "SEATS": "1",
			}
			if !seatsLanded {
				env["SEATS"] = "0"
			}
			for k, v := range s.env {
				env[k] = v
			}
			transport := &http.Transport{MaxIdleConnsPerHost: 32}
			t.Cleanup(transport.CloseIdleConnections)
			res, err := k6compat.Run(context.Background(), k6compat.Config{
				Script: filepath.Join(dir, s.name+".js"), Env: env, Limits: scriptLimits,
				Timeout: 3 * time.Minute, Client: &http.Client{Transport: transport}, Logf: t.Logf,
			})
			if err != nil {
				t.Fatalf("run %s.js: %v", s.name, err)
			}
			t.Logf("%s.js:\n%s", s.name, res.Summary())
			if s.seats && !seatsLanded {
				// The script loads and its options are valid; it stops
				// where the service lacks the seats routes.
				if !strings.Contains(res.SetupError, "create event: 404") {
					t.Errorf("without the seats flow, want setup to fail creating the event; got %q", res.Failures())
				}
				t.Skip("the seats flow is not served yet (seatsLanded)")
			}
			for _, f := range res.Failures() {
				t.Error(f)
			}
			dataTagged(t, stack)
		})
	}
}

// dataTagged checks that what a script made (the stack has no demo
// catalogue: every row is the script's) is tagged as make load's, so the
// shop's pages leave it out (loadtest/k6/lib/config.js, web/shop.js,
// web/posts.js), and that it made something.
func dataTagged(t *testing.T, stack *apptest.Stack) {
	t.Helper()
	made := 0
	for _, q := range []struct{ table, column, tag string }{
		{"products", "sku", "LOAD-%"}, {"posts", "title", "Load test: %"}, {"events", "name", "Load test: %"},
	} {
		var all, untagged int
		err := stack.Env.DB.QueryRow(context.Background(),
			"SELECT count(*), count(*) FILTER (WHERE "+q.column+" NOT LIKE $1) FROM "+q.table, q.tag).Scan(&all, &untagged)
		if err != nil {
			t.Fatalf("count %s: %v", q.table, err)
		}
		if untagged > 0 {
			t.Errorf("%d of the %d %s the script made are not tagged (%s %s)", untagged, all, q.table, q.column, q.tag)
		}
		made += all
	}
	if made == 0 {
		t.Error("the script made no product, post or event: the check saw nothing")
	}
}

// TestScripts_CatchBrokenIdempotency shows the scripts' invariants are
// not decoration: with a proxy in front of the stack that gives every
// order request a key of its own (idempotency broken, as a client
// bug or a layer gone would), flash-sale.js must fail, in its checks and
// in its teardown.
func TestScripts_CatchBrokenIdempotency(t *testing.T) {
	var n atomic.Int64
	stack := apptest.StartWith(t, 2, apptest.StackOptions{Rewrite: func(r *httputil.ProxyRequest) {
		if r.In.Method == http.MethodPost && r.In.URL.Path == "/v1/orders" {
			r.Out.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", r.In.Header.Get("Idempotency-Key"), n.Add(1)))
		}
	}})

	res, err := k6compat.Run(context.Background(), k6compat.Config{
		Script: filepath.Join(scriptsDir(t), "flash-sale.js"), Limits: scriptLimits, Timeout: 3 * time.Minute, Logf: t.Logf,
		Env: map[string]string{"BASE_URL": stack.BaseURL, "GATEWAY_URL": stack.GatewayURL, "ADMIN_TOKEN": apptest.AdminToken,
			"THINK": "0", "RETRY_WAIT_MAX": "0.05", "BUYERS": "4", "STOCK": "8", "CLICKS": "2"},
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	failures := strings.Join(res.Failures(), "\n")
	t.Logf("failures, as wanted:\n%s", failures)
	for _, want := range []string{"teardown threw: GoError: duplicate order", `threshold checks "rate==1" crossed`} {
		if !strings.Contains(failures, want) {
			t.Errorf("want a failure with %q", want)
		}
	}
}

// TestScripts_CatchOverRefunds shows refund-storm.js's teardown is not
// decoration: against replicas whose refund flow has no rule, no version
// check and no orders_refunded_within_total (their variants, the CHECK
// dropped), and a processor whose own check is off, every agent's refund
// goes through, and the teardown must find an order given back more than
// was captured.
func TestScripts_CatchOverRefunds(t *testing.T) {
	probe := &layers.Probe{}
	stack := apptest.StartWith(t, 2, apptest.StackOptions{
		Vars: map[string]string{"SHOP_GATEWAY_REFUND_LIMIT": "off"},
		Deps: app.Deps{Variants: variants.For(layers.Off(layers.State, layers.Version, layers.Constraint), "", probe)},
	})
	stack.Env.Drop(t, orders.ConstraintRefundedWithinTotal)

	res, err := k6compat.Run(context.Background(), k6compat.Config{
		Script: filepath.Join(scriptsDir(t), "refund-storm.js"), Limits: scriptLimits, Timeout: 3 * time.Minute, Logf: t.Logf,
		Env: map[string]string{"BASE_URL": stack.BaseURL, "GATEWAY_URL": stack.GatewayURL, "ADMIN_TOKEN": apptest.AdminToken,
			"THINK": "0", "RETRY_WAIT_MAX": "0.05", "AGENTS": "4", "SHARE": "2", "ROUNDS": "3", "SETTLE_WAIT": "20"},
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	failures := strings.Join(res.Failures(), "\n")
	t.Logf("failures, as wanted:\n%s", failures)
	if want := "the processor gave back"; !strings.Contains(res.TeardownError, want) {
		t.Errorf("want the teardown to fail with %q; it said %q", want, res.TeardownError)
	}
	if !probe.Asked(layers.State) {
		t.Error("the refunds ran with their rule on: the variants took nothing off")
	}
}

// scriptsDir is loadtest/k6 at the module's root.
func scriptsDir(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "loadtest", "k6")
}
