package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	cardgateway "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
)

// childEnv, when set, makes the test binary run as `shop` with the
// arguments it holds, instead of running tests: the crash test starts real
// server processes that it can kill.
const childEnv = "SHOP_TEST_RUN_AS_SHOP"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		// Signals as main takes them, so a test can stop the child cleanly.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
		if err := run(ctx, strings.Fields(args), logger); err != nil {
			logger.Error("shop", "err", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

// TestCrash_MidCharge stops a server process dead after the gateway has
// charged and before the server has recorded the outcome: the worst moment
// to crash. The charge exists, the database says processing. A fresh
// server's reconciler must settle it: the order paid, one succeeded
// payment, one charge.
func TestCrash_MidCharge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs server processes against real PostgreSQL and Redis")
	}
	dbURL := testenv.DatabaseURL(t)
	db := testenv.PoolFor(t, dbURL)

	// The gateway holds its answer to the first charge until the server
	// that asked for it is dead.
	charged := make(chan cardgateway.Charge, 1)
	serverDead := make(chan struct{})
	var once sync.Once
	gw, gwURL := gatewaytest.Start(t, cardgateway.Options{
		AfterCharge: func(c cardgateway.Charge) {
			once.Do(func() {
				charged <- c
				<-serverDead
			})
		},
	})

	environ := []string{
		"SHOP_DATABASE_URL=" + dbURL,
		"SHOP_REDIS_ADDRS=" + strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_GATEWAY_URL=" + gwURL,
		"SHOP_ADMIN_TOKEN=crash-admin",
		"SHOP_JOB_INTERVAL=200ms",
		"SHOP_PAYMENT_RECONCILE_AFTER=1s",
		"SHOP_PAYMENT_BUDGET=900ms",
		"SHOP_GATEWAY_TIMEOUT=10s",
		// Not a test of the limits: their counts for 127.0.0.1 are shared
		// with every other run on the same Redis.
		"SHOP_RATE_LIMIT=off",
	}

	first := startServer(t, environ)
	u := first.call(t, "POST", "/v1/users", "", map[string]string{"name": "crash"}, http.StatusCreated)
	token := u["token"].(string)
	first.call(t, "POST", "/v1/products", "crash-admin",
		map[string]any{"sku": "SKU-CRASH", "name": "Crash", "price_cents": 4200, "stock": 1}, http.StatusCreated)
	o := first.call(t, "POST", "/v1/orders", token,
		map[string]any{"items": []map[string]any{{"sku": "SKU-CRASH", "quantity": 1}}}, http.StatusCreated, "Idempotency-Key", "crash-order")
	orderID := o["id"].(string)

	// Pay; the request never gets an answer, its server dies under it.
	go func() {
		_, _ = first.post("/v1/orders/"+orderID+"/payments", token, `{"payment_method":"pm_card_ok"}`, "crash-pay")
	}()
	var charge cardgateway.Charge
	select {
	case charge = <-charged:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway was never asked to charge")
	}
	first.kill(t)
	close(serverDead)

	if got := paymentStatus(t, db, orderID); got != "processing" {
		t.Fatalf("after the crash the payment is %q, want processing (charged, outcome not recorded)", got)
	}

	// A new server: its reconciler settles the payment with the same key.
	second := startServer(t, environ)
	deadline := time.Now().Add(45 * time.Second)
	for paymentStatus(t, db, orderID) == "processing" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}

	if got := paymentStatus(t, db, orderID); got != "succeeded" {
		t.Fatalf("after the restart the payment is %q, want succeeded", got)
	}
	got := second.call(t, "GET", "/v1/orders/"+orderID, token, nil, http.StatusOK)
	if got["status"] != "paid" && got["status"] != "fulfilled" {
		t.Errorf("order is %v, want paid (or fulfilled since)", got["status"])
	}
	if charges := gw.Charges(orderID); len(charges) != 1 || charges[0].ID != charge.ID {
		t.Errorf("gateway audit for the order: %+v, want only charge %s", charges, charge.ID)
	}
	var recorded string
	if err := db.QueryRow(context.Background(), `SELECT charge_id FROM payments WHERE order_id = $1`, orderID).Scan(&recorded); err != nil || recorded != charge.ID {
		t.Errorf("recorded charge %q (%v), want %s", recorded, err, charge.ID)
	}
}

func paymentStatus(t *testing.T, db *pgxpool.Pool, orderID string) string {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), `SELECT status FROM payments WHERE order_id = $1`, orderID).Scan(&s); err != nil {
		t.Fatalf("read payment: %v", err)
	}
	return s
}

// server is `shop serve` running as a child process.
type server struct {
	cmd        *exec.Cmd
	url        string // the API
	metricsURL string
	logs       *bytes.Buffer
	done       chan struct{}
	exitErr    error // how the process ended, once done is closed
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startServer(t *testing.T, environ []string) *server {
	t.Helper()
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	s := &server{url: "http://" + addr, metricsURL: "http://" + metricsAddr, logs: &bytes.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(os.Args[0], "-test.run=^$")
	s.cmd.Env = append(os.Environ(), append(environ, childEnv+"=serve",
		"SHOP_HTTP_ADDR="+addr, "SHOP_METRICS_ADDR="+metricsAddr)...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	go func() { s.exitErr = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.kill(t)
		if t.Failed() {
			t.Logf("server %s log:\n%s", addr, s.logs)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(s.url + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("server exited: %s", s.logs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("server not ready: %s", s.logs)
	return nil
}

// kill stops the process the way a crash does: no drain, no clean-up.
func (s *server) kill(t *testing.T) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func (s *server) post(path, token, body, key string) (*http.Response, error) {
	req, err := http.NewRequest("POST", s.url+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	return http.DefaultClient.Do(req)
}

// call sends a JSON request and decodes the JSON answer, which must have
// the wanted status.
func (s *server) call(t *testing.T, method, path, token string, body any, want int, header ...string) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, b, want)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
	}
	return out
}
