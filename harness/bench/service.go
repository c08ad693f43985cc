package bench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// service is the real service, in process, behind a real HTTP server on a
// loopback port, and an HTTP client to it.
type service struct {
	metrics *metrics.Metrics
	base    string
	client  *http.Client
	tokens  []string // bearer token of each client
	stop    func()
}

// startService builds the service as `shop serve` does, from the SHOP_*
// settings (pool size SHOP_DB_MAX_CONNS, default lock mode and budgets), on
// the scratch database, the -redis nodes and, unless gatewayURL is "", the
// payment gateway there. It fails unless /readyz says the database and the
// lock quorum answer: a run in degrade mode would measure a flow without
// its lock.
func startService(ctx context.Context, o benchOptions, dbURL, gatewayURL string, tokens []string) (*service, error) {
	return startServiceWith(ctx, o, dbURL, gatewayURL, tokens, app.Deps{})
}

// startServiceWith is startService with extra's tracing (its
// SpanProcessor) and variants (a lock per section of seats) in the
// service.
func startServiceWith(ctx context.Context, o benchOptions, dbURL, gatewayURL string, tokens []string, extra app.Deps) (*service, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg.DatabaseURL, cfg.RedisAddrs = dbURL, o.redisAddrs
	// The bench measures the flows: its few users send hundreds of
	// requests a second, which the limits would refuse.
	cfg.RateLimit.Off = true
	if o.seatLock != "" {
		cfg.SeatLock = o.seatLock
	}
	if gatewayURL != "" {
		cfg.GatewayURL = gatewayURL
	}
	// With o.meter, its pools (the bookkeeping pool app.New derives from
	// this one too) and its Redis clients count for the cell running.
	pool, err := postgres.Open(ctx, dbURL, cfg.DBMaxConns, o.meter.poolOptions()...)
	if err != nil {
		return nil, err
	}
	rdb := redisx.Clients(cfg.RedisAddrs)
	o.meter.countRedis(rdb)
	closeDeps := func() {
		redisx.Close(rdb) //nolint:errcheck
		pool.Close()
	}
	a, err := app.New(cfg, app.Deps{Pool: pool, Redis: rdb, Logger: serviceLogger(),
		SpanProcessor: extra.SpanProcessor, Variants: extra.Variants})
	if err != nil {
		closeDeps()
		return nil, err
	}
	closeAll := func() {
		a.Close()
		closeDeps()
	}
	s, err := serveLoopback(ctx, a.Echo, "/readyz", o.clients, closeAll)
	if err != nil {
		return nil, err
	}
	s.metrics, s.tokens = a.Metrics, tokens
	return s, nil
}

// serviceLogger formats request logs as in production but does not write
// them; warnings and errors go to stderr.
func serviceLogger() *slog.Logger {
	return slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(io.Discard, nil),
		slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
	))
}

// serveLoopback serves h with httpx.Serve (the server `shop serve` runs) on
// a 127.0.0.1 port and waits until readyPath answers 200. stop shuts the
// server down, then calls closeDeps.
func serveLoopback(ctx context.Context, h http.Handler, readyPath string, clients int, closeDeps func()) (*service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeDeps()
		return nil, fmt.Errorf("listen: %w", err)
	}
	srvCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- httpx.Serve(srvCtx, ln, ln.Addr().String(), h, 5*time.Second) }()

	// A Transport of its own: no proxy from the environment, and an idle
	// connection kept for every client, so no request waits for a dial.
	transport := &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	s := &service{base: "http://" + ln.Addr().String(), client: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
	s.stop = func() {
		cancel()
		<-served
		transport.CloseIdleConnections()
		closeDeps()
	}
	if err := s.ready(ctx, readyPath); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *service) ready(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d %s: are the database and a quorum of -redis nodes up?", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// order POSTs /v1/orders as a client would: its bearer token, a fresh
// Idempotency-Key.
func (s *service) order(ctx context.Context, client int, sku string) string {
	a := s.post(ctx, s.tokens[client], "/v1/orders", `{"items":[{"sku":"`+sku+`","quantity":1}]}`, crand.Text())
	return a.failure()
}

// answer is what a POST got: an HTTP status and body, or a transport
// failure.
type answer struct {
	status    int
	replayed  bool   // Idempotent-Replayed: the key's stored answer
	body      []byte // read to the end, so the connection is reused
	transport string // why there is no status: "cancelled", "transport", ...
}

// failure is "" for a 201 that is not a replay, else what it was.
func (a answer) failure() string {
	switch {
	case a.transport != "":
		return a.transport
	case a.status != http.StatusCreated:
		return "http " + strconv.Itoa(a.status)
	case a.replayed:
		return "replayed"
	}
	return ""
}

// post sends a JSON body to path with token and the Idempotency-Key key,
// if not "".
func (s *service) post(ctx context.Context, token, path, body, key string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, strings.NewReader(body))
	if err != nil {
		return answer{transport: "request"}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idempotency.HeaderKey, key)
	}
	return s.do(ctx, req)
}

// do sends req and reads the answer to the end, so the connection is
// reused.
func (s *service) do(ctx context.Context, req *http.Request) answer {
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{transport: "cancelled"}
		}
		return answer{transport: "transport"}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{transport: "read body"}
	}
	return answer{status: resp.StatusCode, replayed: resp.Header.Get(idempotency.HeaderReplayed) != "", body: b}
}

// lockOutcomes summarises the service's lock metrics, to show the layered
// figures are of the whole flow: every order acquired its lock, none ran
// degraded (without Redis).
func (s *service) lockOutcomes() string {
	if s.metrics == nil {
		return "no metrics"
	}
	families, err := s.metrics.Registry.Gather()
	if err != nil {
		return "metrics unavailable: " + err.Error()
	}
	var parts []string
	for _, f := range families {
		name := strings.TrimPrefix(strings.TrimSuffix(f.GetName(), "_total"), "shop_lock_")
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "shop_lock_acquisitions_total":
				parts = append(parts, fmt.Sprintf("%s=%.0f", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()))
			case "shop_lock_degraded_total", "shop_lock_unlock_errors_total":
				parts = append(parts, fmt.Sprintf("%s=%.0f", name, m.GetCounter().GetValue()))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
