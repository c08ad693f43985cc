package orders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Locker runs work under a distributed lock (platform/lock.Locker), or
// under none (lock.None) when a test switches layer 1 off.
type Locker interface {
	Do(ctx context.Context, key string, fn func(ctx context.Context) error) error
}

// Defences switches the layers of the order flows on and off. Production
// runs with all of them (AllDefences); the layer tests switch single layers
// off to show that the others still hold the invariant, and switch the
// database layers off to show the invariant can break.
type Defences struct {
	State            bool // layer 2: the state machine's rules
	Version          bool // layer 3: version-checked status writes
	ConditionalStock bool // layer 3 for counters: the atomic conditional decrement
}

// AllDefences is what production runs with.
func AllDefences() Defences {
	return Defences{State: true, Version: true, ConditionalStock: true}
}

// Flow names, the "flow" label of the conflict counter.
const (
	// FlowCreate is exported for the idempotency middleware on the create
	// route (idempotency.Store.For), so both count under one name.
	FlowCreate = "create_order"
	flowCancel = "cancel_order"
	flowExpire = "expire_order"
)

// maxVersionRetries bounds how often a flow re-reads after losing a race
// on the version check, so contention never becomes an unbounded loop.
const maxVersionRetries = 3

// Config holds what the service is built from.
type Config struct {
	Store    *Store
	Locker   Locker
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	OrderTTL time.Duration
	Now      func() time.Time
	Defences Defences
}

// Service runs the order flows. Each reads top to bottom in layer order.
type Service struct {
	store    *Store
	locker   Locker
	metrics  *metrics.Metrics
	logger   *slog.Logger
	ttl      time.Duration
	now      func() time.Time
	defences Defences
}

// NewService returns the order service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Locker == nil {
		return nil, errors.New("orders: a store and a locker are required")
	}
	if cfg.OrderTTL <= 0 {
		return nil, fmt.Errorf("orders: order TTL must be positive, got %s", cfg.OrderTTL)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{store: cfg.Store, locker: cfg.Locker, metrics: cfg.Metrics, logger: cfg.Logger,
		ttl: cfg.OrderTTL, now: cfg.Now, defences: cfg.Defences}, nil
}

// Create places an order for userID: every line's stock is reserved, or
// none is. requestKey is the client's Idempotency-Key; placing the same
// request twice returns the first order.
func (s *Service) Create(ctx context.Context, userID, requestKey string, lines []inventory.Line) (Order, error) {
	if err := ValidateLines(lines); err != nil {
		return Order{}, err
	}
	var out Order
	// Layer 1: lock the business request (user + key), never the products:
	// a lock on a hot SKU would queue every buyer of a flash sale behind
	// Redis; the stock row itself serialises them, far more cheaply.
	// Through the HTTP route, the idempotency middleware already holds a
	// claim on this very (user, key), a lease in PostgreSQL that admits one
	// request at a time; a Redis lock on the same key would add six round
	// trips and guard nothing more. Without that claim, Redis it is.
	var locker Locker = s.locker
	if idempotency.Holds(ctx, userID, requestKey) {
		locker = lock.None{}
	}
	err := locker.Do(ctx, "order:"+userID+":"+requestKey, func(ctx context.Context) error {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new order id: %w", err)
		}
		now := s.now().UTC().Truncate(time.Microsecond)
		o := Order{ID: id.String(), UserID: userID, RequestKey: requestKey, Status: StatusPendingPayment,
			Version: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(s.ttl)}

		// Layer 3: the atomic conditional decrement of each line's stock,
		// with layer 4 behind it: CHECK (stock_available >= 0) refuses an
		// oversell, and UNIQUE (user_id, request_key) a second order.
		out, err = s.store.Create(ctx, o, lines, s.defences.ConditionalStock)
		switch {
		case errors.Is(err, ErrDuplicateRequest):
			s.metrics.Stopped(FlowCreate, metrics.LayerConstraint)
			out, err = s.store.ByRequestKey(ctx, userID, requestKey)
			return err
		case errors.Is(err, inventory.ErrStockConstraint):
			s.metrics.Stopped(FlowCreate, metrics.LayerConstraint)
		case errors.Is(err, inventory.ErrOutOfStock):
			s.metrics.Stopped(FlowCreate, metrics.LayerVersion)
		}
		return err
	})
	s.countBusy(FlowCreate, err)
	return out, err
}

// Cancel cancels one of userID's orders and returns its stock, once.
// Cancelling a cancelled order returns it unchanged.
func (s *Service) Cancel(ctx context.Context, userID, id string) (Order, error) {
	if !ValidID(id) {
		return Order{}, ErrNotFound
	}
	var out Order
	// Layer 1: one cancel of this order at a time, across replicas.
	err := s.locker.Do(ctx, "order:"+id, func(ctx context.Context) error {
		for attempt := 1; ; attempt++ {
			// Layer 3: Update writes only if the order is still at the
			// version read; layer 4: stock_releases admits one release.
			o, err := s.store.Update(ctx, id, s.defences.Version, func(o *Order) (bool, error) {
				if o.UserID != userID {
					return false, ErrNotFound // someone else's order does not exist for this user
				}
				now := s.now().UTC().Truncate(time.Microsecond)
				// Layer 2: the state machine decides what cancel means now.
				if !s.defences.State {
					o.Status, o.UpdatedAt = StatusCancelled, now
					return true, nil
				}
				changed, err := o.Cancel(now)
				if err != nil || !changed {
					s.metrics.Stopped(flowCancel, metrics.LayerState)
				}
				return changed, err
			})
			switch {
			case errors.Is(err, ErrVersionConflict) && attempt < maxVersionRetries:
				s.metrics.Stopped(flowCancel, metrics.LayerVersion)
				continue
			case errors.Is(err, ErrVersionConflict):
				s.metrics.Stopped(flowCancel, metrics.LayerVersion)
				return &problem.Error{Code: problem.ResourceBusy, Detail: "the order keeps changing; try again", RetryAfter: time.Second}
			case errors.Is(err, ErrAlreadyReleased):
				s.metrics.Stopped(flowCancel, metrics.LayerConstraint)
				out, err = s.store.Get(ctx, id)
				return err
			}
			out = o
			return err
		}
	})
	s.countBusy(flowCancel, err)
	return out, err
}

// Get returns one of userID's orders. Another user's order is not found.
func (s *Service) Get(ctx context.Context, userID, id string) (Order, error) {
	if !ValidID(id) {
		return Order{}, ErrNotFound
	}
	o, err := s.store.Get(ctx, id)
	if err != nil {
		return Order{}, err
	}
	if o.UserID != userID {
		return Order{}, ErrNotFound
	}
	return o, nil
}

// List returns a page of userID's orders, newest first.
func (s *Service) List(ctx context.Context, userID, cursor string, limit int) ([]Order, string, error) {
	return s.store.List(ctx, userID, cursor, limit)
}

func (s *Service) countBusy(flow string, err error) {
	if problem.CodeOf(err) == problem.ResourceBusy {
		s.metrics.Stopped(flow, metrics.LayerLock)
	}
}
