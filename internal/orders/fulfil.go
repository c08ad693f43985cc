package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

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
//	0 idempotency   the inbox: the event's row (consumer, event id), read
//	                before the lock and written in the move's transaction
//	1 lock          order:{id}, as a cancel takes it
//	2 state         Order.Fulfil: paid → fulfilled
//	3 version       UpdateTx: sqlUpdateStatus
//	4 constraint    fulfilments_pkey: one fulfilment per order
const (
	// ConsumerFulfilment is the consumer's group and its name in the inbox.
	ConsumerFulfilment = "fulfilment"
	flowFulfil         = "fulfil_order"
	// ConstraintFulfilledOnce admits one fulfilment per order.
	ConstraintFulfilledOnce = "fulfilments_pkey"
)

// ErrAlreadyFulfilled means the order was shipped before (the
// fulfilments primary key said so).
var ErrAlreadyFulfilled = errors.New("order already fulfilled")

const sqlInsertFulfilment = `INSERT INTO fulfilments (order_id, event_id, fulfilled_at) VALUES ($1, $2, $3)`

// Fulfil acts on one delivery of order.paid: the order is fulfilled once,
// whatever the copies of the event and however they race.
func (s *Service) Fulfil(ctx context.Context, e outbox.Event) (outbox.Outcome, error) {
	if e.Name != outbox.OrderPaid {
		return outbox.Skipped, nil
	}
	id := e.Subject
	if !ids.Valid(id) {
		return outbox.Failed, fmt.Errorf("order.paid of %q: %w", id, outbox.ErrPermanent)
	}
	// Layer 0: a copy of an event already acted on is dropped before it
	// waits for any lock; the transaction's own inbox row is the proof.
	if s.fulfil.On(layers.Idempotency) {
		seen, err := outbox.Seen(ctx, s.store.db, ConsumerFulfilment, e)
		if err != nil || seen {
			if seen {
				s.fulfil.Stopped(ctx, layers.Idempotency)
			}
			return outbox.Duplicate, err
		}
	}
	outcome := outbox.Processed
	// Layer 1: the order's lock, the one a cancel takes.
	err := s.fulfil.Lock(ctx, "order:"+id, func(ctx context.Context) error {
		return s.fulfil.Retry(ctx, func(int) error {
			var err error
			outcome, err = s.store.Fulfil(ctx, id, e, s.layers, s.now().UTC().Truncate(time.Microsecond), func(o *Order) (bool, error) {
				now := s.now().UTC().Truncate(time.Microsecond)
				// Layer 2: only a paid order ships.
				if !s.layers.On(layers.State) {
					o.Status, o.UpdatedAt = StatusFulfilled, now
					return true, nil
				}
				changed, err := o.Fulfil(now)
				if err != nil || !changed {
					s.fulfil.Stopped(ctx, layers.State)
				}
				return changed, nil
			})
			switch {
			case errors.Is(err, ErrVersionConflict):
				return layers.Lost(layers.Version, err)
			case errors.Is(err, ErrAlreadyFulfilled):
				s.fulfil.Stopped(ctx, layers.Constraint)
				outcome = outbox.Duplicate
				return nil
			}
			if outcome == outbox.Duplicate {
				s.fulfil.Stopped(ctx, layers.Idempotency)
			}
			return err
		})
	})
	if errors.Is(err, ErrNotFound) {
		return outbox.Failed, fmt.Errorf("order.paid of %s: %w: %w", id, err, outbox.ErrPermanent)
	}
	return outcome, err
}

// Fulfil records e in the fulfilment consumer's inbox (layer 0, unless on
// has it off), lets change apply the rule to the order, and writes the
// move at the version read with the order's one fulfilment row, in one
// transaction. It returns Duplicate when the inbox held e already,
// Skipped when change wrote nothing (recorded all the same), and
// ErrAlreadyFulfilled when the order has its fulfilment.
func (s *Store) Fulfil(ctx context.Context, id string, e outbox.Event, on layers.Set, now time.Time,
	change func(*Order) (bool, error)) (outbox.Outcome, error) {
	outcome := outbox.Processed
	err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
		if on.On(layers.Idempotency) {
			fresh, err := outbox.Record(ctx, tx, ConsumerFulfilment, e, now)
			if err != nil {
				return err
			}
			if !fresh {
				outcome = outbox.Duplicate
				return nil
			}
		}
		written := false
		o, err := UpdateTx(ctx, tx, id, on, func(o *Order) (bool, error) {
			write, err := change(o)
			written = write
			return write, err
		})
		if err != nil {
			return err
		}
		if !written {
			outcome = outbox.Skipped
			return nil
		}
		_, err = tx.Exec(ctx, sqlInsertFulfilment, o.ID, e.ID, now)
		if postgres.ConstraintViolated(err) == ConstraintFulfilledOnce {
			return ErrAlreadyFulfilled
		}
		return err
	})
	if err != nil {
		return outbox.Processed, err
	}
	return outcome, nil
}
