package app_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// linkedReplica is one replica whose PostgreSQL and Redis nodes are
// reached through links the test can cut: a dependency going down, as the
// replica sees it, while the shared servers stay up for every other test.
type linkedReplica struct {
	*apptest.Replica
	postgres *testenv.Link
	redis    []*testenv.Link
}

func newLinkedReplica(t *testing.T, lockMode string) linkedReplica {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	lr := linkedReplica{postgres: testenv.NewLink(t, u.Host)}
	u.Host = lr.postgres.Addr()
	var addrs []string
	for _, a := range testenv.RedisAddrs(t) {
		l := testenv.NewLink(t, a)
		lr.redis = append(lr.redis, l)
		addrs = append(addrs, l.Addr())
	}
	environ := map[string]string{
		"SHOP_DATABASE_URL": u.String(),
		"SHOP_REDIS_ADDRS":  strings.Join(addrs, ","),
		"SHOP_ADMIN_TOKEN":  apptest.AdminToken,
		"SHOP_LOCK_MODE":    lockMode,
	}
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	_, cfg.GatewayURL = gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay})
	clients := redisx.Clients(cfg.RedisAddrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	a, err := app.New(cfg, app.Deps{Pool: testenv.PoolFor(t, cfg.DatabaseURL), Redis: clients, Logger: apptest.Logger(t)})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	lr.Replica = apptest.Serve(t, a, &http.Client{Transport: apptest.CheckedTransport(t, http.DefaultTransport)})
	return lr
}

// readyDoc is the body of GET /readyz (README, "Operations"); a 503 is a
// problem document with the same members added.
type readyDoc struct {
	Ready    bool     `json:"ready"`
	Degraded []string `json:"degraded"`
	Checks   map[string]struct {
		Status string `json:"status"`
		Detail string `json:"detail"`
	} `json:"checks"`
}

// wantReady checks /readyz: its status, the state of each dependency, and
// the readiness gauges on the replica's metrics.
func wantReady(t *testing.T, r *apptest.Replica, status int, postgres, lockQuorum string) readyDoc {
	t.Helper()
	res := r.Do(t, http.MethodGet, "/readyz", "", nil)
	doc := apptest.Decode[readyDoc](t, res)
	if res.Status != status || doc.Ready != (status == http.StatusOK) {
		t.Errorf("/readyz: got %s, want %d", res, status)
	}
	for dep, want := range map[string]string{"postgres": postgres, "lock_quorum": lockQuorum} {
		if got := doc.Checks[dep].Status; got != want {
			t.Errorf("/readyz: %s is %q, want %q: %s", dep, got, want, res.Body)
		}
	}
	wantDegraded := 0
	if lockQuorum == "degraded" {
		wantDegraded = 1
		if len(doc.Degraded) != 1 || doc.Degraded[0] != "lock_quorum" {
			t.Errorf("/readyz: degraded %q, want [lock_quorum]", doc.Degraded)
		}
	}
	ready := 0
	if status == http.StatusOK {
		ready = 1
	}
	m := apptest.Scrape(t, r)
	for _, sample := range []string{
		"shop_ready " + strconv.Itoa(ready),
		`shop_degraded{dependency="lock_quorum"} ` + strconv.Itoa(wantDegraded),
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + `$`).MatchString(m) {
			name, _, _ := strings.Cut(sample, " ")
			name, _, _ = strings.Cut(name, "{")
			t.Errorf("metrics lack %q; they have:\n%s", sample, apptest.GrepLines(m, name))
		}
	}
	return doc
}

// Readiness says whether this replica can serve: PostgreSQL must answer;
// the lock quorum only in strict mode. In degrade mode the replica serves
// without the lock when the quorum is lost, so it stays in the balancer and
// says it is degraded: every replica shares the Redis nodes, and a 503
// there took all of them out at once (issue 8, item 5).
func TestReadiness(t *testing.T) {
	t.Run("AllUp", func(t *testing.T) {
		r := newLinkedReplica(t, "degrade")
		doc := wantReady(t, r.Replica, http.StatusOK, "ok", "ok")
		if d := doc.Checks["lock_quorum"].Detail; !strings.Contains(d, "3 of 3") {
			t.Errorf("lock_quorum detail %q, want it to count the nodes that answer", d)
		}
	})

	t.Run("OneOfThreeNodesDown", func(t *testing.T) {
		r := newLinkedReplica(t, "strict")
		r.redis[2].Down()
		wantReady(t, r.Replica, http.StatusOK, "ok", "ok")
	})

	t.Run("DegradeTwoOfThreeNodesDown", func(t *testing.T) {
		r := newLinkedReplica(t, "degrade")
		r.redis[0].Down()
		r.redis[1].Down()
		doc := wantReady(t, r.Replica, http.StatusOK, "ok", "degraded")
		if d := doc.Checks["lock_quorum"].Detail; !strings.Contains(d, "1 of 3") {
			t.Errorf("lock_quorum detail %q, want it to say 1 of 3 nodes answer", d)
		}
		// It says it can serve, and it does: the order is made without the
		// lock, on the database's defences.
		apptest.MustCreateProduct(t, r.Replica, "READY", 100, 5)
		u := apptest.MustCreateUser(t, r.Replica, "rita")
		apptest.MustCreateOrder(t, r.Replica, u.Token, apptest.Line{SKU: "READY", Quantity: 1})

		for _, l := range r.redis {
			l.Up()
		}
		wantReady(t, r.Replica, http.StatusOK, "ok", "ok")
	})

	t.Run("StrictTwoOfThreeNodesDown", func(t *testing.T) {
		r := newLinkedReplica(t, "strict")
		r.redis[0].Down()
		r.redis[1].Down()
		res := r.Do(t, http.MethodGet, "/readyz", "", nil) // do checks the problem document
		apptest.WantProblem(t, res, http.StatusServiceUnavailable, "unavailable")
		wantReady(t, r.Replica, http.StatusServiceUnavailable, "ok", "down")
	})

	t.Run("PostgresUnreachable", func(t *testing.T) {
		r := newLinkedReplica(t, "degrade")
		r.postgres.Down()
		res := r.Do(t, http.MethodGet, "/readyz", "", nil)
		apptest.WantProblem(t, res, http.StatusServiceUnavailable, "unavailable")
		if strings.Contains(string(res.Body), r.postgres.Addr()) {
			t.Errorf("/readyz reveals the database address: %s", res.Body)
		}
		wantReady(t, r.Replica, http.StatusServiceUnavailable, "down", "ok")

		r.postgres.Up()
		wantReady(t, r.Replica, http.StatusOK, "ok", "ok")
	})
}
