package orders_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// TestCreate_CopiesDoNotStallThePool: POST /v1/orders under
// idempotency.Store.Atomic, on a service pool of 8 connections. The first
// request of a key is held inside its transaction (the test holds its
// product's row lock), and 49 copies of it arrive while 40 other users
// order other products. The copies are refused at once with
// request_in_progress, by the claim's try-advisory-lock: none waits inside
// PostgreSQL or keeps a connection, so every other user is answered while
// the first request still waits. Then the first completes, and its key
// replays its order. The other users' latency is logged with and without
// the copies; only the invariant and the refusals are asserted.
func TestCreate_CopiesDoNotStallThePool(t *testing.T) {
	t.Parallel()
	const poolSize, others = 8, 40
	for _, copies := range []int{0, 49} {
		// One after the other, so that their latencies compare.
		t.Run(fmt.Sprintf("Copies=%d", copies), func(t *testing.T) {
			s := newAtomicServer(t, poolSize, others, nil)
			held := s.holdRow(t, "HOT")
			first := make(chan reply, 1)
			go func() { first <- s.order(t, s.users[0], "hot-key", "HOT") }()
			// The first request is in its transaction, waiting for the row.
			for s.waiting(t) < 1 {
				time.Sleep(time.Millisecond)
			}

			var (
				wg        sync.WaitGroup
				copyReply = make([]reply, copies)
				latency   = make([]time.Duration, others)
				most      atomic.Int64
				sampling  = make(chan struct{})
				sampled   = make(chan struct{})
			)
			go func() {
				defer close(sampled)
				for {
					most.Store(max(most.Load(), s.waiting(t)))
					select {
					case <-sampling:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			for i := range copies {
				wg.Go(func() { copyReply[i] = s.order(t, s.users[0], "hot-key", "HOT") })
			}
			for i := range others {
				wg.Go(func() {
					began := time.Now()
					rep := s.order(t, s.users[1+i], "own-key", fmt.Sprintf("SKU-%d", i))
					latency[i] = time.Since(began)
					if rep.status != http.StatusCreated {
						t.Errorf("user %d: got %d %s, want 201", i, rep.status, rep.body)
					}
				})
			}
			wg.Wait() // every copy and every other user answered, the row still held
			close(sampling)
			<-sampled
			held.release(t)
			won := <-first
			if won.status != http.StatusCreated || won.replayed {
				t.Fatalf("first: got %d replayed=%v %s, want a fresh 201", won.status, won.replayed, won.body)
			}

			slices.Sort(latency)
			t.Logf("%d copies: the other users' latency p50 %s, max %s; most sessions waiting on a lock at once: %d (the first request)",
				copies, latency[others/2], latency[others-1], most.Load())
			if most.Load() != 1 {
				t.Errorf("at most %d sessions waited on a lock, want 1: the first request, on its row", most.Load())
			}
			for _, rep := range copyReply {
				if rep.status != http.StatusConflict || !strings.Contains(string(rep.body), `"request_in_progress"`) {
					t.Fatalf("copy: got %d %s, want 409 request_in_progress", rep.status, rep.body)
				}
			}
			if again := s.order(t, s.users[0], "hot-key", "HOT"); !again.replayed || !bytes.Equal(again.body, won.body) {
				t.Errorf("retry: got %d replayed=%v %s, want the first order replayed", again.status, again.replayed, again.body)
			}
			// The invariant: one order per (user, key), and the stock counts them.
			if n := s.int(t, `SELECT count(*) FROM orders WHERE user_id = $1`, s.users[0].ID); n != 1 {
				t.Errorf("%d orders of the first user, want 1", n)
			}
			if n := s.int(t, `SELECT count(*) FROM orders`); n != 1+others {
				t.Errorf("%d orders, want %d", n, 1+others)
			}
			if n := s.int(t, `SELECT sum(stock_available) FROM products`); n != (1+others)*10-(1+others) {
				t.Errorf("%d units in stock, want %d", n, (1+others)*9)
			}
			if n := s.locks.Load(); n != 0 {
				t.Errorf("the Redis lock was taken %d times under the idempotency record, want 0", n)
			}
		})
	}
}

// TestCreate_ThreeRoundTrips: an order under the idempotency record costs
// the service three round trips to PostgreSQL on one connection (BEGIN
// with the claim; the stock; the insert with the completion and COMMIT).
func TestCreate_ThreeRoundTrips(t *testing.T) {
	t.Parallel()
	trips := &testenv.RoundTrips{}
	s := newAtomicServer(t, 1, 2, trips)
	// The first order of the connection prepares its statements.
	if rep := s.order(t, s.users[1], "warm", "SKU-0"); rep.status != http.StatusCreated {
		t.Fatalf("warm-up: got %d %s", rep.status, rep.body)
	}
	trips.Reset()
	if rep := s.order(t, s.users[2], "counted", "SKU-1"); rep.status != http.StatusCreated {
		t.Fatalf("order: got %d %s", rep.status, rep.body)
	}
	if n := trips.N(); n != 3 {
		t.Errorf("%d round trips for one order, want 3", n)
	}
	if again := s.order(t, s.users[2], "counted", "SKU-1"); !again.replayed {
		t.Fatalf("retry: got %d %s, want a replay", again.status, again.body)
	}
}

// atomicServer is the order routes under Atomic, with the service on a
// pool of its own size and the test's statements on another.
type atomicServer struct {
	direct *pgxpool.Pool // the test's own pool, and the idempotency store's
	users  []testenv.User
	srv    *httptest.Server
	locks  atomic.Int64 // calls of the Redis lock
}

func (s *atomicServer) int(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.direct.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waiting is how many sessions of the test's database wait for a lock
// another transaction holds. A relation's extension lock, which concurrent
// inserts take in turn to add a page, is no wait for another request.
func (s *atomicServer) waiting(t *testing.T) int64 {
	return int64(s.int(t, `SELECT count(DISTINCT l.pid)::int FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE NOT l.granted AND l.locktype <> 'extend' AND a.datname = current_database()`))
}

// countingLocker is the Redis lock, which no request should take.
type countingLocker struct{ n *atomic.Int64 }

func (l countingLocker) Do(ctx context.Context, _ string, fn func(context.Context) error) error {
	l.n.Add(1)
	return fn(ctx)
}

// newAtomicServer serves the order routes with the service on a pool of
// poolSize connections, traced by tracer when it is not nil, and makes
// 1+others users and products SKU-0… and HOT, 10 units each.
func newAtomicServer(t *testing.T, poolSize int32, others int, tracer pgx.QueryTracer) *atomicServer {
	t.Helper()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	direct := testenv.PoolFor(t, url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.ConnConfig.Tracer = poolSize, tracer
	svcPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svcPool.Close)
	s := &atomicServer{direct: direct, users: testenv.Users(t, direct, 1+others)}
	products := inventory.NewStore(direct, nil)
	for i := range others + 1 {
		sku := fmt.Sprintf("SKU-%d", i)
		if i == others {
			sku = "HOT"
		}
		if _, err := products.Create(ctx, inventory.Product{SKU: sku, Name: sku, PriceCents: 100, StockAvailable: 10}); err != nil {
			t.Fatal(err)
		}
	}

	m := metrics.New()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := orders.NewService(orders.Config{DB: svcPool, Locker: countingLocker{&s.locks},
		Metrics: m, Logger: logger, OrderTTL: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	idem := idempotency.NewStore(direct, idempotency.Options{Logger: logger, Metrics: m})
	e := httpx.New(m, httpx.Options{Logger: logger})
	pass := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	orders.Register(e.Group("/v1"), svc, orders.Guards{
		User: func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				ctx := auth.WithPrincipal(c.Request().Context(), auth.Principal{UserID: c.Request().Header.Get("X-Test-User")})
				c.SetRequest(c.Request().WithContext(ctx))
				return next(c)
			}
		},
		OrderLimit: pass, WriteLimit: pass, Idempotency: idem.Atomic(orders.FlowCreate),
	})
	s.srv = httptest.NewServer(e)
	t.Cleanup(s.srv.Close)
	return s
}

// heldRow is a product row the test holds locked in a transaction.
type heldRow struct{ release func(t *testing.T) }

// holdRow locks a product's row until release: an order of it waits
// inside its transaction, with its key's claim held.
func (s *atomicServer) holdRow(t *testing.T, sku string) heldRow {
	t.Helper()
	locked, release, done := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- postgres.InTx(context.Background(), s.direct, func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), `SELECT 1 FROM products WHERE sku = $1 FOR UPDATE`, sku)
			locked <- err
			<-release
			return err
		})
	}()
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	h := heldRow{release: func(t *testing.T) {
		once.Do(func() {
			close(release)
			if err := <-done; err != nil {
				t.Errorf("hold %s: %v", sku, err)
			}
		})
	}}
	t.Cleanup(func() { h.release(t) })
	return h
}

// reply is an answer to POST /v1/orders.
type reply struct {
	status   int
	replayed bool
	body     []byte
}

// order places one unit of sku for u with key.
func (s *atomicServer) order(t *testing.T, u testenv.User, key, sku string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/orders",
		strings.NewReader(`{"items": [{"sku": "`+sku+`", "quantity": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-User", u.ID)
	req.Header.Set(idempotency.HeaderKey, key)
	res, err := s.srv.Client().Do(req)
	if err != nil {
		t.Errorf("order: %v", err)
		return reply{}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("order: %v", err)
	}
	return reply{status: res.StatusCode, replayed: res.Header.Get(idempotency.HeaderReplayed) == "true", body: body}
}
