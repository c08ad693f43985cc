package lab

import (
	"log/slog"
	"time"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/ratelimit"
)

// Attached is the lab attached to one replica of the shop: its routes,
// and the copies of the service it builds there, the live copy and the
// sandboxes, which Close stops.
type Attached struct {
	h *host
}

// host is the replica the lab is attached to: the app, and the settings
// and connections it was built with, which the lab's copies of the
// service are built on too.
type host struct {
	*app.App
	cfg       config.Config
	deps      app.Deps
	sandboxes *sandboxes
	live      *liveCopy
}

// Attach attaches the race lab to a, the replica app.New built with cfg
// and deps: the lab's routes under /v1/lab, a race counted against the
// user's limit (policy lab, SHOP_RATE_LIMIT_LAB), and before routing the
// live copy's (a request with the lab's key is served by the copy, not by
// a). The copies are built on deps' Pool (their schemas), Redis, Logger
// and Now; the caller still owns them. `shop serve` attaches it on a demo server (SHOP_DEMO=true), and so
// do the test stacks (harness/apptest); elsewhere /v1/lab is an unknown
// route. Call it before a serves, and Close before a closes.
func Attach(a *app.App, cfg config.Config, deps app.Deps) (*Attached, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	raceLimit, err := a.Limit(ratelimit.Policy{Name: "lab", Rate: ratelimit.Rate(cfg.RateLimit.Lab), Per: ratelimit.PerUser})
	if err != nil {
		return nil, err
	}
	h := &host{App: a, cfg: cfg, deps: deps}
	h.sandboxes = &sandboxes{a: h}
	h.live = newLiveCopy(h)
	// The race lab's live runs, before routing: a request with the lab's
	// key is the live copy's (demo servers only).
	a.Echo.Pre(h.live.route)
	Register(a.API(), New(Config{
		Demo: cfg.Demo, Replica: a.Replica(), Logger: deps.Logger, Now: deps.Now,
		Live: h.live.target, LiveMetrics: h.live.liveMetrics, Sandbox: h.sandboxes.build,
	}), Guards{User: a.User(), RaceLimit: raceLimit})
	return &Attached{h: h}, nil
}

// Close stops the copies of the service the lab built, and the writer of
// their spans. The replica's server must have stopped first: a request
// still routed to the live copy would find it closed.
func (at *Attached) Close() {
	at.h.live.close()
	at.h.sandboxes.close()
}
