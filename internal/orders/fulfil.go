package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// Fulfilment ships each paid order once: a consumer of order.paid
// (package outbox) that moves the order to fulfilled, on the same layers
// as every other move of an order:
//
//	0 idempotency   the inbox: the event's row (consumer, event id),
//	                written in the move's transaction, behind the lock
//	1 lock          pg_advisory_xact_lock on the order, in the round
//	                trip that begins the transaction (Store.QueueLock):
//	                no Redis; a cancel takes its own, in Redis, which a
//	                fulfilment never needs to wait for (a paid order
//	                cannot be cancelled)
//	2 state         Fulfil: paid → fulfilled
//	3 version       Store.Update: sqlUpdateOrder
//	4 constraint    fulfilments_pkey: one fulfilment per order
const (
	// ConsumerFulfilment is the consumer's group and its name in the inbox.
	ConsumerFulfilment = "fulfilment"
	flowFulfil         = "fulfil_order"
)

// Fulfil acts on one delivery of order.paid: the order is fulfilled once,
// whatever the copies of the event and however they race.
func (s *Service) Fulfil(ctx context.Context, e outbox.Event) (outbox.Outcome, error) {
	if e.Name != outbox.OrderPaid {
		return outbox.Skipped, nil
	}
	id := e.Subject
	if !ids.Valid(id) {
		return outbox.Failed, s.giveUp(ctx, e, fmt.Errorf("order.paid of %q: %w", id, outbox.ErrPermanent))
	}
	outcome := outbox.Processed
	err := s.fulfil.Retry(ctx, func(int) error {
		now := s.stamp()
		var (
			fresh bool
			read  Order
		)
		// One transaction in three round trips: BEGIN with the lock, the
		// inbox row and the order's read; the order's write and the
		// fulfilment; COMMIT. The write is checked before the COMMIT is
		// sent: a write at a version no longer there matches no row,
		// which PostgreSQL does not count as an error, and a COMMIT sent
		// with it would ship an order left as it was.
		err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
			// Layer 1: the order's advisory lock, to COMMIT: copies of
			// the event ship one at a time, each after the one before
			// has committed.
			s.orders.QueueLock(b, id)
			// Layer 0: the event's inbox row, in the move's transaction:
			// a copy that raced this one waited for its commit above,
			// and finds the row here.
			s.inbox.QueueRecord(b, ConsumerFulfilment, e, now, &fresh)
			s.orders.QueueGet(b, id, &read)
		}, func(tx pgx.Tx) (*pgx.Batch, error) {
			if !fresh {
				outcome = outbox.Duplicate
				return nil, nil
			}
			// Layer 2: only a paid order ships; layer 3: at the version
			// read. An order that cannot ship (not paid, or shipped) is
			// left as it is, and the event recorded as skipped.
			write := &pgx.Batch{}
			o, moved, err := s.orders.QueueMove(ctx, write, read, Fulfil(now))
			if errors.Is(err, ErrInvalidState) || (err == nil && !moved) {
				outcome = outbox.Skipped
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			// Layer 4: fulfilments_pkey, one shipment per order.
			outcome = outbox.Processed
			s.orders.QueueFulfilled(write, o.ID, e.ID, now)
			return nil, tx.SendBatch(ctx, write).Close()
		})
		switch {
		case errors.Is(err, ErrVersionConflict):
			return layers.Lost(layers.Version, err)
		case postgres.ConstraintViolated(err) == ConstraintFulfilledOnce:
			s.fulfil.Stopped(ctx, layers.Constraint)
			outcome = outbox.Duplicate
			return nil
		case err == nil && outcome == outbox.Duplicate:
			s.fulfil.Stopped(ctx, layers.Idempotency)
		case err == nil && outcome == outbox.Skipped:
			s.fulfil.Stopped(ctx, layers.State)
		}
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return outbox.Failed, s.giveUp(ctx, e, fmt.Errorf("order.paid of %s: %w: %w", id, err, outbox.ErrPermanent))
	}
	return outcome, err
}

// giveUp records an event no redelivery can act on, for an operator to
// see and replay (outbox.GiveUp), before it is acknowledged.
func (s *Service) giveUp(ctx context.Context, e outbox.Event, cause error) error {
	return outbox.GiveUp(ctx, s.db, ConsumerFulfilment, e, cause, s.stamp())
}
