package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Bounds of a run: the page offers 10–200.
const (
	MinSize = 10
	MaxSize = 200
	// runTimeout bounds a whole run, setup and checks included.
	runTimeout = 25 * time.Second
	// cooldown is the pause between two runs on one replica.
	cooldown = time.Second
)

// Target is a copy of the service a run races against.
type Target struct {
	// Name is "live" (the public API) or "sandbox".
	Name string
	// URL is its public address, e.g. the load balancer's.
	URL string
	// GatewayURL is the payment gateway it charges, asked how many
	// charges an order got.
	GatewayURL string
	// Pool reaches its tables: the lab creates its users and products
	// there and checks the invariant there.
	Pool *pgxpool.Pool
	// Metrics is the registry whose counters the run reports the moves
	// of: this replica's, for a live run.
	Metrics *metrics.Metrics
	// Layers are the layers on in it.
	Layers layers.Set
}

// Sandbox builds a copy of the service with the layers of set and returns
// it, and the function that stops it.
type Sandbox func(ctx context.Context, set layers.Set) (Target, func(), error)

// Config is what the lab needs from the application.
type Config struct {
	// Demo turns the lab on (SHOP_DEMO); without it every route is 404.
	Demo bool
	// Replica names this replica in the stats.
	Replica string
	// Live is the service as the public reaches it.
	Live Target
	// Sandbox builds the copies runs with layers off go to.
	Sandbox Sandbox
	Logger  *slog.Logger
}

// Lab runs races, one at a time.
type Lab struct {
	cfg    Config
	client *http.Client

	mu      sync.Mutex // held for a whole run
	lastEnd time.Time  // guarded by mu
}

// New returns the lab.
func New(cfg Config) *Lab {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	transport := &http.Transport{MaxIdleConns: MaxSize, MaxIdleConnsPerHost: MaxSize, IdleConnTimeout: 30 * time.Second}
	return &Lab{cfg: cfg, client: &http.Client{Transport: transport, Timeout: 15 * time.Second}}
}

// Register adds the lab's routes to the /v1 group.
func Register(g *echo.Group, l *Lab) {
	g.GET("/lab/stats", l.stats, l.demoOnly)
	g.POST("/lab/races", l.race, l.demoOnly)
}

// demoOnly answers 404 unless the server is a demo: the lab creates users
// and fires hundreds of requests, which no production server should do
// for an anonymous caller.
func (l *Lab) demoOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !l.cfg.Demo {
			return problem.New(problem.NotFound, "the race lab runs only on a demo server (SHOP_DEMO=true)")
		}
		return next(c)
	}
}

// statsDoc is the answer of GET /v1/lab/stats.
type statsDoc struct {
	Replica string             `json:"replica"`
	Metrics map[string]float64 `json:"metrics"`
}

func (l *Lab) stats(c echo.Context) error {
	m, err := gather(l.cfg.Live.Metrics)
	if err != nil {
		return err
	}
	return httpx.JSON(c, http.StatusOK, statsDoc{Replica: l.cfg.Replica, Metrics: m})
}

// raceRequest is the body of POST /v1/lab/races.
type raceRequest struct {
	Scenario  string   `json:"scenario"`
	Size      int      `json:"size"`
	LayersOff []string `json:"layers_off"`
}

// switchable are the layers a sandbox can take off: all five (the
// constraints by running on a schema without them).
var switchable = map[string]layers.Layer{
	"idempotency": layers.Idempotency,
	"lock":        layers.Lock,
	"state":       layers.State,
	"version":     layers.Version,
	"constraint":  layers.Constraint,
}

func (r raceRequest) validate() (scenario, layers.Set, error) {
	sc, ok := scenarios[r.Scenario]
	if !ok {
		names := make([]string, 0, len(scenarios))
		for n := range scenarios {
			names = append(names, n)
		}
		slices.Sort(names)
		return scenario{}, layers.Set{}, problem.Errorf(problem.Invalid, "scenario: want one of %s", strings.Join(names, ", "))
	}
	if r.Size < MinSize || r.Size > MaxSize {
		return scenario{}, layers.Set{}, problem.Errorf(problem.Invalid, "size: want %d–%d", MinSize, MaxSize)
	}
	var off []layers.Layer
	for _, name := range r.LayersOff {
		layer, ok := switchable[name]
		if !ok {
			return scenario{}, layers.Set{}, problem.Errorf(problem.Invalid, "layers_off: %q is not one of idempotency, lock, state, version, constraint", name)
		}
		off = append(off, layer)
	}
	return sc, layers.Off(off...), nil
}

// race runs one race and streams it: an event "start", an "answer" per
// request as it lands, then "outcome" (or "failure" if the run could not
// be set up or checked).
func (l *Lab) race(c echo.Context) error {
	var req raceRequest
	if err := httpx.Bind(c, &req); err != nil {
		return err
	}
	sc, set, err := req.validate()
	if err != nil {
		return err
	}
	if !l.mu.TryLock() {
		return &problem.Error{Code: problem.RateLimited, Detail: "another race is running on this replica", RetryAfter: 2 * time.Second}
	}
	defer l.mu.Unlock()
	if wait := cooldown - time.Since(l.lastEnd); wait > 0 {
		return &problem.Error{Code: problem.RateLimited, Detail: "one race at a time: the last one just ended", RetryAfter: time.Second}
	}
	defer func() { l.lastEnd = time.Now() }()

	// The run outlives the request timeout of the API's middleware; it
	// stops with the client.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), runTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.Request().Context().Done():
			if c.Request().Context().Err() == context.Canceled {
				cancel()
			}
		case <-ctx.Done():
		}
	}()

	target := l.cfg.Live
	if len(set.Taken()) > 0 {
		sb, stop, err := l.cfg.Sandbox(ctx, set)
		if err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		defer stop()
		target = sb
	}

	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on as it comes
	c.Response().WriteHeader(http.StatusOK)
	s := &stream{w: c.Response()}
	r := &run{lab: l, target: target, size: req.Size, id: runID()}
	s.send("start", map[string]any{"scenario": req.Scenario, "size": req.Size, "target": target.Name,
		"layers": set.String(), "run": r.id})
	outcome, err := r.execute(ctx, sc, s)
	if err != nil {
		l.cfg.Logger.WarnContext(ctx, "lab run failed", "scenario", req.Scenario, "err", err)
		s.send("failure", map[string]string{"detail": err.Error()})
		return nil
	}
	s.send("outcome", outcome)
	return nil
}

// stream writes Server-Sent Events.
type stream struct {
	w *echo.Response
}

func (s *stream) send(event string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b)
	s.w.Flush()
}
