package likes_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/redisx"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is one test database with the pieces of the like flow.
type fixture struct {
	pool  *pgxpool.Pool
	store *likes.Store
	clock *testenv.Clock
	addrs []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := testenv.Pool(t)
	return &fixture{pool: pool, store: likes.NewStore(pool), clock: testenv.NewClock(), addrs: testenv.RedisAddrs(t)}
}

// service builds a like service with the layers on and shards counter
// rows per new post, with the default lock (in PostgreSQL). Each is a
// replica: its own Redis clients and metrics. The layers off run on their
// variants (harness/variants), which tell on's probe when they act.
func (f *fixture) service(t *testing.T, on layers.Set, shards int) (*likes.Service, *metrics.Metrics) {
	t.Helper()
	return f.serviceLocking(t, "", on, shards)
}

// serviceLocking is service with the lock strategy of layer 1; the Redis
// lock runs over the test's Redis nodes.
func (f *fixture) serviceLocking(t *testing.T, strategy likes.LockStrategy, on layers.Set, shards int) (*likes.Service, *metrics.Metrics) {
	t.Helper()
	return f.serviceOn(t, strategy, variants.Likes(f.store, on, on.Probe()), on, shards)
}

// serviceOn is serviceLocking on rows, the production step or a variant
// of it; with on's lock off the Redis lock is not taken either.
func (f *fixture) serviceOn(t *testing.T, strategy likes.LockStrategy, rows likes.LikeRows, on layers.Set, shards int) (*likes.Service, *metrics.Metrics) {
	t.Helper()
	m := metrics.New()
	var locker layers.Locker = variants.NoLock{Probe: on.Probe()}
	if !on.Takes(layers.Lock) {
		clients := redisx.Clients(f.addrs)
		t.Cleanup(func() { _ = redisx.Close(clients) })
		l, err := lock.New(clients, lock.Options{Metrics: m, WaitBudget: likes.LockWait})
		if err != nil {
			t.Fatalf("lock.New: %v", err)
		}
		locker = l
	}
	svc, err := likes.NewService(likes.Config{DB: f.pool, Locker: locker, Metrics: m, Now: f.clock.Now,
		Shards: shards, Lock: strategy, Likes: rows})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	return svc, m
}

// move reads userID's like of postID and moves it by change through rows,
// in one transaction as the flow does, but with no lock, running between
// after the read and before the write: another request's work in the gap
// that layers 3 and 4 guard.
func (f *fixture) move(t *testing.T, rows likes.LikeRows, postID, userID string, change likes.Change, between func()) (likes.Like, int64, bool, error) {
	t.Helper()
	var read *likes.LikeRead
	var move *likes.LikeMove
	err := postgres.InTxBatched(context.Background(), f.pool, func(b *pgx.Batch) {
		read = rows.QueueRead(b, postID, userID)
	}, func(pgx.Tx) (*pgx.Batch, error) {
		if between != nil {
			between()
		}
		last := &pgx.Batch{}
		var err error
		move, err = rows.QueueMove(last, read, f.clock.Now(), change)
		return last, err
	})
	return move.Result(err)
}

func (f *fixture) mustPost(t *testing.T, svc *likes.Service, author string) likes.Post {
	t.Helper()
	p, err := svc.CreatePost(context.Background(), author, "a post")
	if err != nil {
		t.Fatalf("create post: %v", err)
	}
	return p
}

// users registers n users and returns their ids.
func (f *fixture) users(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i, u := range testenv.Users(t, f.pool, n) {
		ids[i] = u.ID
	}
	return ids
}

// count runs a query that returns one integer.
func (f *fixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (f *fixture) mustExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// checkCounts checks the count's invariants on the database: each counter
// row of the post equals the liked rows that name it (so their sum is
// the number of liked rows), and no (post, user) has two like rows. It
// returns the number of liked rows.
func (f *fixture) checkCounts(t *testing.T, postID string) int {
	t.Helper()
	liked := f.count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1 AND liked`, postID)
	if sum := f.count(t, `SELECT sum(n)::int FROM post_like_shards WHERE post_id = $1`, postID); sum != liked {
		t.Errorf("counter rows sum to %d, liked rows %d", sum, liked)
	}
	if bad := f.count(t, `SELECT count(*)::int FROM post_like_shards s
		WHERE s.post_id = $1 AND s.n <> (SELECT count(*) FROM likes l WHERE l.post_id = s.post_id AND l.shard = s.shard AND l.liked)`, postID); bad != 0 {
		t.Errorf("%d counter rows differ from the liked rows that name them", bad)
	}
	if dupes := f.count(t, `SELECT (count(*) - count(DISTINCT user_id))::int FROM likes WHERE post_id = $1`, postID); dupes != 0 {
		t.Errorf("%d duplicate like rows", dupes)
	}
	return liked
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// stoppedBy is how many conflicts of flow m counted as stopped by layer.
func stoppedBy(t *testing.T, m *metrics.Metrics, flow, layer string) float64 {
	t.Helper()
	return testutil.ToFloat64(m.ConflictsStopped.WithLabelValues(flow, layer))
}

// metricValue is the value of the unlabelled gauge or counter name in m.
func metricValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) != 1 {
			continue
		}
		if g := f.GetMetric()[0].GetGauge(); g != nil {
			return g.GetValue()
		}
		return f.GetMetric()[0].GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// mustDrop takes the constraint named name, of the flow's catalogue
// (likes.Constraints), out of the test's database.
func (f *fixture) mustDrop(t *testing.T, name string) {
	t.Helper()
	c, ok := postgres.Lookup(likes.Constraints, name)
	if !ok {
		t.Fatalf("%s is not in likes.Constraints", name)
	}
	f.mustExec(t, c.Drop())
}
