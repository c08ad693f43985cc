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
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// The layers of the order flows, where each one is in this package:
//
//	layer           create                           cancel                      expire
//	0 idempotency   the key's record: claimed first  —                           —
//	                and completed last in the
//	                order's transaction (Store.Create)
//	1 lock          with layer 0, the claim's        order:{id}                  none: SKIP LOCKED
//	                advisory lock on (user, key);    (Cancel)                    (sqlExpireDue)
//	                without it, order:{user}:{key}
//	                in Redis (Create)
//	2 state         —                                Order.Cancel                pending_payment only
//	                                                                             (sqlExpireDue)
//	3 version       inventory.TakeStock:             UpdateTx: sqlUpdateStatus   the version bump
//	                the conditional decrement
//	4 constraint    orders_user_request_key,         stock_releases_pkey         stock_releases_pkey
//	                products_stock_nonnegative

// Flow names, the "flow" label of the conflict counter.
const (
	// FlowCreate is exported for the idempotency middleware on the create
	// route (idempotency.Store.Atomic), so both count under one name.
	FlowCreate = "create_order"
	flowCancel = "cancel_order"
	flowExpire = "expire_order"
)

// Config holds what the service is built from.
type Config struct {
	Store    *Store
	Locker   layers.Locker
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	OrderTTL time.Duration
	Now      func() time.Time
	// Layers are the defences on. The zero value is all of them; only the
	// layer tests take some off.
	Layers layers.Set
	// NaiveStock is how stock is taken when a layer test takes layer 3
	// off: inventory.TakeUnconditional unless it says
	// inventory.TakeReadCheckWrite. With layer 3 on it is not used.
	NaiveStock inventory.Take
}

// Service runs the order flows. Each reads top to bottom in layer order.
type Service struct {
	store                          *Store
	create, cancel, expire, fulfil layers.Flow
	metrics                        *metrics.Metrics
	logger                         *slog.Logger
	ttl                            time.Duration
	now                            func() time.Time
	layers                         layers.Set
	naiveStock                     inventory.Take
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
	if cfg.NaiveStock == inventory.TakeConditional {
		cfg.NaiveStock = inventory.TakeUnconditional
	}
	flow := layers.Flows("order", cfg.Layers, cfg.Locker, cfg.Metrics)
	return &Service{store: cfg.Store, create: flow(FlowCreate), cancel: flow(flowCancel), expire: flow(flowExpire),
		fulfil:  flow(flowFulfil),
		metrics: cfg.Metrics, logger: cfg.Logger, ttl: cfg.OrderTTL, now: cfg.Now, layers: cfg.Layers,
		naiveStock: cfg.NaiveStock}, nil
}

// WithLayers returns the service with on as its layers: the fulfilment
// consumer runs on a set of its own, which the ablation test changes apart
// from the API's.
func (s *Service) WithLayers(on layers.Set) *Service {
	c := *s
	flow := layers.Flows("order", on, s.fulfil.Locker, s.metrics)
	c.layers = on
	c.create, c.cancel, c.expire, c.fulfil = flow(FlowCreate), flow(flowCancel), flow(flowExpire), flow(flowFulfil)
	return &c
}

// Create places an order for userID: every line's stock is reserved, or
// none is. requestKey is the client's Idempotency-Key; placing the same
// request twice returns the first order.
func (s *Service) Create(ctx context.Context, userID, requestKey string, lines []inventory.Line) (Order, error) {
	if err := ValidateLines(lines); err != nil {
		return Order{}, err
	}
	// Layer 0: the key's record, when the route has the layer (Atomic).
	// The order's transaction claims it first and completes it last, so
	// the order and the answer that replays it commit together or not at
	// all.
	rec := idempotency.RecordFrom(ctx)
	var out Order
	// Layer 1: lock the business request (user + key), never the products:
	// a lock on a hot SKU would queue every buyer of a flash sale behind
	// Redis; the stock row itself serialises them, far more cheaply. With
	// layer 0 the claim takes pg_try_advisory_xact_lock on this very
	// (user, key) inside the transaction, and a copy of the request is
	// refused at once; a Redis lock on the same key would add six round
	// trips and guard nothing more. Without the record, Redis it is.
	keys := []string{"order:" + userID + ":" + requestKey}
	if rec != nil {
		keys = nil // the claim's advisory lock is layer 1
	}
	err := s.create.LockAll(ctx, keys, func(ctx context.Context) error {
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
		out, err = s.store.Create(ctx, o, lines, s.stockTake(), rec)
		switch {
		case errors.Is(err, ErrDuplicateRequest):
			// The order was placed by an earlier request with the key, one
			// whose record is gone (swept) or that ran without layer 0.
			s.create.Stopped(ctx, layers.Constraint)
			out, err = s.store.ByRequestKey(ctx, userID, requestKey)
			return err
		case errors.Is(err, inventory.ErrStockConstraint):
			s.create.Stopped(ctx, layers.Constraint)
		case errors.Is(err, inventory.ErrOutOfStock):
			s.create.Stopped(ctx, layers.Version)
		}
		return err
	})
	return out, err
}

// stockTake is how stock is taken: the conditional decrement (layer 3),
// or the naive way a layer test asked for.
func (s *Service) stockTake() inventory.Take {
	if s.layers.On(layers.Version) {
		return inventory.TakeConditional
	}
	return s.naiveStock
}

// Cancel cancels one of userID's orders and returns its stock, once.
// Cancelling a cancelled order returns it unchanged.
func (s *Service) Cancel(ctx context.Context, userID, id string) (Order, error) {
	if !ids.Valid(id) {
		return Order{}, ErrNotFound
	}
	var out Order
	// Layer 1: one cancel of this order at a time, across replicas.
	err := s.cancel.Lock(ctx, "order:"+id, func(ctx context.Context) error {
		return s.cancel.Retry(ctx, func(int) error {
			// Layer 3: Update writes only if the order is still at the
			// version read; layer 4: stock_releases admits one release.
			o, err := s.store.Update(ctx, id, s.layers, func(o *Order) (bool, error) {
				if o.UserID != userID {
					return false, ErrNotFound // someone else's order does not exist for this user
				}
				now := s.now().UTC().Truncate(time.Microsecond)
				// Layer 2: the state machine decides what cancel means now.
				if !s.layers.On(layers.State) {
					o.Status, o.UpdatedAt = StatusCancelled, now
					return true, nil
				}
				changed, err := o.Cancel(now)
				if err != nil || !changed {
					s.cancel.Stopped(ctx, layers.State)
				}
				return changed, err
			})
			switch {
			case errors.Is(err, ErrVersionConflict):
				return layers.Lost(layers.Version, err)
			case errors.Is(err, ErrAlreadyReleased):
				s.cancel.Stopped(ctx, layers.Constraint)
				out, err = s.store.Get(ctx, id)
				return err
			}
			out = o
			return err
		})
	})
	return out, err
}

// Get returns one of userID's orders. Another user's order is not found.
func (s *Service) Get(ctx context.Context, userID, id string) (Order, error) {
	if !ids.Valid(id) {
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
