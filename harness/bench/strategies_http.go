package bench

// Every baseline of the shoot-out is also served over HTTP, so that it is
// measured through what the layered flow pays for besides its guards: the
// service's edge (httpx.New: request id, logging, metrics, recover, body
// limit, request timeout, problem answers), the bearer-token check
// (auth.Middleware over the bench's users), a JSON body in and a JSON
// answer out, a loopback round trip and the HTTP client. The handler then
// runs the strategy's own operation, in the server, exactly as the
// in-process run calls it: what differs between a baseline's two columns
// is the HTTP, and between a baseline's HTTP column and the layered row,
// the guards.
//
// One route per flow and strategy, POST /bench/{flow}/{strategy}
// (baselinePath), registered once; each run puts its cell's operation in
// the route's slot and takes it out after. The body names the key of the
// operation ({"key": "S1-SKU-7"}: a SKU, an order id, seats "A1,A2", a
// post). A success answers 201 with what was done; a refusal, 409 (402
// for a decline, 422 for a refund beyond what is left) problem+json with a
// code and the operation's own word for it as the detail, which the
// client counts as in process; any other failure, 500.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// baselineRouter is the baselines' HTTP server on loopback and the client
// to it.
type baselineRouter struct {
	svc     *service
	slots   map[string]*baselineSlot // by path
	clients map[string]int           // the client number of each user id
	// turns has a lock per client, which each of its operations holds:
	// a client's operations run one at a time, as in process, whichever
	// connection and server goroutine its requests arrive on.
	turns []sync.Mutex
}

// baselineSlot holds the steps of the operation of the cell running on a
// route, if any.
type baselineSlot struct {
	steps atomic.Pointer[[]orderFunc]
}

// baselineRequest is the body of every baseline request: the key, and
// which step of the operation to run (0 for an operation of one).
type baselineRequest struct {
	Key  string `json:"key"`
	Step int    `json:"step,omitempty"`
}

// baselineAnswer is the body of a success.
type baselineAnswer struct {
	Flow     string `json:"flow"`
	Strategy string `json:"strategy"`
	Key      string `json:"key"`
	Done     string `json:"done"`
}

// baselinePath is the route of a flow's strategy: spaces become dashes.
func baselinePath(flow, strategy string) string {
	return "/bench/" + flow + "/" + strings.ReplaceAll(strategy, " ", "-")
}

// startBaselineRouter serves a route for every baseline of flows (every
// strategy that applies but the layered one, which is the service's own)
// on a loopback port, as users whose bearer tokens are tokens. The users
// are looked up in pool, as the service looks them up in its own.
func startBaselineRouter(ctx context.Context, o benchOptions, pool *pgxpool.Pool, flows []flowSpec, users, tokens []string) (*baselineRouter, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	r := &baselineRouter{slots: map[string]*baselineSlot{}, clients: map[string]int{}, turns: make([]sync.Mutex, len(users))}
	for i, u := range users {
		r.clients[u] = i
	}
	e := httpx.New(metrics.New(), httpx.Options{Logger: serviceLogger(), RequestTimeout: cfg.RequestTimeout})
	authn := auth.NewMiddleware(auth.NewStore(pool), cfg.AdminToken)
	e.GET("/readyz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, f := range flows {
		for _, name := range strategyNames {
			if s, ok := f.strategies[name]; ok && s.na == "" && name != "layered" {
				path := baselinePath(f.name, name)
				slot := &baselineSlot{}
				r.slots[path] = slot
				e.POST(path, r.handle(f, name, slot), authn.User)
			}
		}
	}
	if r.svc, err = serveLoopback(ctx, e, "/readyz", o.clients, func() {}); err != nil {
		return nil, err
	}
	r.svc.tokens = tokens
	return r, nil
}

// handle runs the operation in slot for the client the token names, on
// the key the body names.
func (r *baselineRouter) handle(f flowSpec, strategy string, slot *baselineSlot) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req baselineRequest
		if err := httpx.Bind(c, &req); err != nil {
			return err
		}
		if req.Key == "" {
			return problem.New(problem.Invalid, "key is required")
		}
		ctx := c.Request().Context()
		p, _ := auth.PrincipalFrom(ctx)
		client, ok := r.clients[p.UserID]
		if !ok {
			return problem.New(problem.Forbidden, "not one of the bench's clients")
		}
		steps := slot.steps.Load()
		if steps == nil {
			return problem.New(problem.NotFound, "no cell of "+f.name+"/"+strategy+" is running")
		}
		if req.Step < 0 || req.Step >= len(*steps) {
			return problem.Errorf(problem.Invalid, "step: %d, the operation has %d", req.Step, len(*steps))
		}
		r.turns[client].Lock()
		failure := (*steps)[req.Step](ctx, client, req.Key)
		r.turns[client].Unlock()
		if failure != "" {
			return refusalOf(failure)
		}
		return httpx.JSON(c, http.StatusCreated, baselineAnswer{Flow: f.name, Strategy: strategy, Key: req.Key, Done: f.done})
	}
}

// refusals are the failures of the baselines' operations that are
// answers, not faults, and the code each is answered with.
var refusals = map[string]problem.Code{
	"out of stock":      problem.OutOfStock,
	"not pending":       problem.InvalidState,
	"version conflict":  problem.InvalidState,
	"unique violation":  problem.AlreadyExists,
	"duplicate like":    problem.AlreadyExists,
	"declined":          problem.PaymentDeclined,
	"lock busy":         problem.ResourceBusy,
	"exceeds remaining": problem.RefundExceedsRemaining,
	failBusy:            problem.ResourceBusy,
	failConflict:        problem.SeatUnavailable,
}

// refusalOf is the problem a failure is answered with: a refusal keeps its
// word as the detail; anything else is an internal error (500).
func refusalOf(failure string) error {
	if code, ok := refusals[failure]; ok {
		return problem.New(code, failure)
	}
	return errors.New(failure)
}

// serve puts the steps of an operation in the route of flow's strategy
// until the returned function is called.
func (r *baselineRouter) serve(flow, strategy string, steps []orderFunc) (stop func()) {
	slot := r.slots[baselinePath(flow, strategy)]
	slot.steps.Store(&steps)
	return func() { slot.steps.Store(nil) }
}

// client is the operation as a client runs it: for each of its steps in
// turn, POST the key and the step to the route of flow's strategy, with
// the client's token. A 201 is a success; a refusal is the failure its
// detail names, as in process, and ends the operation.
func (r *baselineRouter) client(flow, strategy string, steps int) orderFunc {
	path := baselinePath(flow, strategy)
	return func(ctx context.Context, client int, key string) string {
		for step := range steps {
			if failure := r.send(ctx, path, client, baselineRequest{Key: key, Step: step}); failure != "" {
				return failure
			}
		}
		return ""
	}
}

// send POSTs one step and returns its failure, or "".
func (r *baselineRouter) send(ctx context.Context, path string, client int, req baselineRequest) string {
	body, err := json.Marshal(req)
	if err != nil {
		return "request"
	}
	a := r.svc.post(ctx, r.svc.tokens[client], path, string(body), "")
	if a.status == http.StatusConflict || a.status == http.StatusPaymentRequired || a.status == http.StatusUnprocessableEntity {
		var p struct {
			Detail string `json:"detail"`
		}
		if json.Unmarshal(a.body, &p) == nil && p.Detail != "" {
			return p.Detail
		}
	}
	return a.failure()
}

func (r *baselineRouter) stop() { r.svc.stop() }
