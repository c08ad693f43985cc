package variants

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// NoLock is the lock taken off: fn runs at once, with no lock.
type NoLock struct{ Probe *layers.Probe }

// Do runs fn without a lock.
func (n NoLock) Do(ctx context.Context, _ string, fn func(context.Context) error) error {
	n.Probe.Took(layers.Lock)
	return fn(ctx)
}

// NoKeys is the keyed routes' Idempotency-Key middleware left out: each
// request runs as if it were the first of its key.
func NoKeys(probe *layers.Probe) func(echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(echo.MiddlewareFunc) echo.MiddlewareFunc {
		return func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				probe.Took(layers.Idempotency)
				return next(c)
			}
		}
	}
}

// NoInbox is a consumer's inbox taken off: it has seen no event, and
// records none.
type NoInbox struct{ Probe *layers.Probe }

// Seen answers false.
func (n NoInbox) Seen(context.Context, string, outbox.Event) (bool, error) {
	n.Probe.Took(layers.Idempotency)
	return false, nil
}

// QueueRecord queues nothing, and answers that the event is new.
func (n NoInbox) QueueRecord(_ *pgx.Batch, _ string, _ outbox.Event, _ time.Time, fresh *bool) {
	n.Probe.Took(layers.Idempotency)
	*fresh = true
}

var _ outbox.Inbox = NoInbox{}
