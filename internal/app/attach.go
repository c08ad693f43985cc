package app

import (
	"context"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/internal/platform/ratelimit"
)

// What a tool that attaches itself to a built replica from outside uses:
// the race lab (harness/lab) adds its routes, routes its own requests to
// copies of the service it builds with New, and runs their consumers
// with no relay. New builds the shop and nothing else; Echo and Metrics
// are the rest of what such a tool reaches.

// Replica is this replica's name, what X-Served-By says:
// SHOP_REPLICA_NAME, else the host's name.
func (a *App) Replica() string { return a.replica }

// API is the group of the versioned API's routes (/v1), for the routes a
// tool adds; they meet the replica's middleware, as the shop's own do.
func (a *App) API() *echo.Group { return a.v1 }

// User is the guard of a registered user's routes: a bearer token that
// names a user, else 401 unauthenticated.
func (a *App) User() echo.MiddlewareFunc { return a.authn.User }

// Limit returns the middleware that enforces p, counted where the
// replica's own limits are (package ratelimit); with the limits off
// (SHOP_RATE_LIMIT=off) it passes every request on.
func (a *App) Limit(p ratelimit.Policy) (echo.MiddlewareFunc, error) {
	return a.limits.limiter.Limit(p)
}

// RunConsumers runs this replica's event consumers, as that many
// replicas of it would, without the relay, until ctx ends: for a copy of
// the service whose events are delivered by someone else (the race lab,
// its broker). RunEvents runs them with the relay.
func (a *App) RunConsumers(ctx context.Context, replicas int) {
	a.events.consume(ctx, replicas)
}

// Streams are this replica's event streams as a broker sees them.
type Streams struct {
	// Redis holds the streams; each is named Relay().Prefix() then its
	// event's name.
	Redis *redis.Client
	// Readers are, for each event, the consumers whose groups read its
	// stream.
	Readers map[string][]string
}

// Streams returns this replica's event streams and their readers.
func (a *App) Streams() Streams {
	readers := map[string][]string{}
	for _, c := range a.events.consumers {
		for _, name := range c.Events {
			readers[name] = append(readers[name], c.Name)
		}
	}
	return Streams{Redis: a.events.rdb, Readers: readers}
}
