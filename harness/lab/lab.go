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
	"github.com/shop-example/shop/internal/platform/outbox"
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

// RouteHeader carries the key that sends a request to the live copy: a
// replica of a demo server that sees it with the right key serves the
// request from that copy, on the copy's tables, instead of its own.
const RouteHeader = "X-Shop-Lab"

// Target is a copy of the service a run races against.
type Target struct {
	// Name is "live" (every layer on, behind the public address) or
	// "sandbox".
	Name string
	// URL is its public address, e.g. the load balancer's.
	URL string
	// Header goes with every request of the race and of its setup and
	// check: for a live run, the RouteHeader that sends them to the live
	// copy on whichever replica the balancer picks.
	Header http.Header
	// GatewayURL is the payment gateway it charges, asked how many
	// charges an order got and what their refunds gave back.
	GatewayURL string
	// AdminToken is its admin's bearer token: the support agents of a
	// refund storm refund with it, as the shop's support does.
	AdminToken string
	// MailerURL is the mail provider its consumers send receipts
	// through, asked how many receipts an order got.
	MailerURL string
	// Events is its event stream, which its consumers read: a
	// redelivery storm writes its copies there.
	Events Broker
	// Pool reaches its tables: the lab creates its users and products
	// there and checks the invariant there.
	Pool *pgxpool.Pool
	// Metrics is the registry whose counters the run reports the moves
	// of: this replica's, for a live run.
	Metrics *metrics.Metrics
	// Layers are the layers on in it.
	Layers layers.Set
	// Spans is where its copies of the service keep the spans of a race's
	// requests (Recorder), read back for the race's waterfall; nil draws
	// none.
	Spans *SpanStore
}

// Broker is a target's event stream as a broker that delivers events
// again would see it: the lab takes an event from the target's outbox,
// writes copies of it, and waits for the target's consumers to have
// handled every copy.
type Broker interface {
	// Event returns the event name about subject that the target's
	// outbox holds.
	Event(ctx context.Context, name, subject string) (outbox.Event, error)
	// Publish writes a copy of each of copies, as the target's outbox
	// holds it, into its stream: in the order given and in one
	// transaction, so that the consumers find them there together.
	Publish(ctx context.Context, copies ...outbox.Event) error
	// Handled reports whether every consumer of the stream of event name
	// has acknowledged every copy written to it.
	Handled(ctx context.Context, name string) (bool, error)
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
	// Live returns the live copy: the service with every layer on, reached
	// through the public address like any client's request, but on tables,
	// a gateway, a mail provider and event streams of its own, so a run
	// never writes to the real shop.
	Live func(ctx context.Context) (Target, error)
	// LiveMetrics is this replica's live copy's registry, whose counters
	// GET /v1/lab/stats reports; nil before its first request.
	LiveMetrics func() *metrics.Metrics
	// Sandbox builds the copies runs with layers off go to.
	Sandbox Sandbox
	// Now is the clock of the pause between runs; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Guards are the protections of the route that starts a race, in order.
type Guards struct {
	User      echo.MiddlewareFunc // a registered user's bearer token
	RaceLimit echo.MiddlewareFunc // races per user (SHOP_RATE_LIMIT_LAB)
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	transport := &http.Transport{MaxIdleConns: MaxSize, MaxIdleConnsPerHost: MaxSize, IdleConnTimeout: 30 * time.Second}
	return &Lab{cfg: cfg, client: &http.Client{Transport: transport, Timeout: 15 * time.Second}}
}

// Register adds the lab's routes to the /v1 group. A race is a user's,
// counted against their limit: each one creates up to 200 users and fires
// 200 requests. The stats are read by the lab itself, through the
// balancer, with no token.
func Register(g *echo.Group, l *Lab, guards Guards) {
	g.GET("/lab/stats", l.stats, l.demoOnly)
	g.POST("/lab/races", l.race, l.demoOnly, guards.User, guards.RaceLimit)
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
	var live *metrics.Metrics
	if l.cfg.LiveMetrics != nil {
		live = l.cfg.LiveMetrics()
	}
	m, err := gather(live)
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
// be set up or checked), then, for a race of requests, "waterfall", drawn
// from the requests' spans.
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
	if wait := cooldown - l.cfg.Now().Sub(l.lastEnd); wait > 0 {
		return &problem.Error{Code: problem.RateLimited, Detail: "one race at a time: the last one just ended", RetryAfter: time.Second}
	}
	defer func() { l.lastEnd = l.cfg.Now() }()

	// The run outlives the request timeout of the API's middleware; it
	// stops with the client.
	// The request's context is read here, once: echo hands c to the next
	// request as soon as this handler returns.
	reqCtx := c.Request().Context()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(reqCtx), runTimeout)
	defer cancel()
	stopWatch := context.AfterFunc(reqCtx, func() {
		if reqCtx.Err() == context.Canceled {
			cancel()
		}
	})
	defer stopWatch()

	var target Target
	if len(set.Taken()) == 0 {
		if target, err = l.cfg.Live(ctx); err != nil {
			return fmt.Errorf("live copy: %w", err)
		}
	} else {
		sb, stop, err := l.cfg.Sandbox(ctx, set)
		if err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		defer stop()
		target = sb
	}

	// The schema's window: the rows of earlier runs go once there are
	// too many and no run uses them; this run holds the schema until it
	// ends.
	if swept, err := sweep(ctx, target.Pool, keepUsers); err != nil {
		l.cfg.Logger.WarnContext(ctx, "lab: sweep the schema", "target", target.Name, "err", err)
	} else if swept {
		l.cfg.Logger.InfoContext(ctx, "lab: emptied the schema of earlier runs", "target", target.Name, "kept_at_most_users", keepUsers)
	}
	release, err := holdSchema(ctx, target.Pool)
	if err != nil {
		return err
	}
	defer release()

	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on as it comes
	c.Response().WriteHeader(http.StatusOK)
	s := &stream{w: c.Response()}
	r := &run{lab: l, target: target, size: req.Size, id: runID()}
	if target.Spans != nil {
		// The store holds the last minutes' races: their waterfalls are
		// drawn as they end.
		if err := target.Spans.DeleteBefore(ctx, time.Now().Add(-spansKept)); err != nil {
			l.cfg.Logger.WarnContext(ctx, "lab spans: delete old ones", "err", err)
		}
	}
	s.send("start", map[string]any{"scenario": req.Scenario, "size": req.Size, "target": target.Name,
		"layers": set.String(), "run": r.id})
	outcome, err := r.execute(ctx, sc, s)
	if err != nil {
		l.cfg.Logger.WarnContext(ctx, "lab run failed", "scenario", req.Scenario, "err", err)
		s.send("failure", map[string]string{"detail": err.Error()})
		return nil
	}
	s.send("outcome", outcome)
	if target.Spans != nil && r.answered > 0 {
		w, err := r.waterfall(ctx, r.answered)
		if err != nil {
			l.cfg.Logger.WarnContext(ctx, "lab waterfall", "scenario", req.Scenario, "err", err)
			return nil
		}
		s.send("waterfall", w)
	}
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
