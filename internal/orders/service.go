package orders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The layers of the order flows, where each one is in this package:
//
//	layer           create                           cancel                      expire
//	0 idempotency   the key's record: claimed first  —                           —
//	                and completed last in the
//	                order's transaction (Create)
//	1 lock          the claim's advisory lock on     order:{id} in Redis         none: SKIP LOCKED
//	                (user, key); without a record,   (Cancel)                    (sqlDueOrders)
//	                order:{user}:{key} in Redis
//	2 state         —                                Cancel (orders.go)          Expire (orders.go)
//	3 version       Stock.Take: the conditional      Store.Update:               Store.Update's write
//	                decrement                        sqlUpdateOrder
//	4 constraint    orders_user_request_key,         stock_releases_pkey         stock_releases_pkey
//	                products_stock_nonnegative
//
// What the client is answered when a layer refuses (the codes' statuses
// are httpx/errors.go's one table):
//
//	create  0  a copy still running: 409 request_in_progress; a finished
//	           one: its answer again; the key with other items: 422
//	           idempotency_key_reused
//	        3  a line beyond the stock: 409 out_of_stock, nothing taken
//	        4  the CHECK behind it: 409 out_of_stock; the unique key: the
//	           order placed under the key (the items must match)
//	cancel  1  held by another cancel: 409 resource_busy, Retry-After;
//	           no majority of the Redis nodes reachable: the cancel runs
//	           without the lock (lock.Degrade, counted) or 503 (Strict)
//	        2  paid, expired, …: 409 invalid_state; already cancelled: 200,
//	           the order as it is
//	        3  moved since read: read again (3 tries, then 409
//	           resource_busy)
//	        4  stock returned before: the order as the first cancel left it
//
// What each layer of a create runs (the SQL of the order in
// postgres.go, of the stock in inventory/postgres.go, of the key in
// platform/idempotency/record.go):
//
//	0  pg_try_advisory_xact_lock on (user, key), then INSERT INTO
//	   idempotency_keys … ON CONFLICT DO UPDATE … RETURNING (claim), in
//	   the order's first round trip; UPDATE idempotency_keys SET
//	   status_code, body … WHERE owner = the claim's token (complete),
//	   with the order's insert and COMMIT
//	1  that same try-lock: a copy of the request is refused at once
//	   (request_in_progress); without a key's record, SET
//	   order:{user}:{key} NX PX on a majority of the Redis nodes
//	3  per line, UPDATE products SET stock_available = stock_available
//	   - qty WHERE sku = $1 AND stock_available >= qty RETURNING
//	   price_cents (inventory.Store.Take): no row is ErrOutOfStock
//	4  CHECK products_stock_nonnegative behind it (ErrStockConstraint:
//	   409 out_of_stock); INSERT INTO orders under UNIQUE (user_id,
//	   request_key) (orders_user_request_key: the order placed under the
//	   key is the answer)
//
// What each layer of a cancel runs (the SQL is in postgres.go):
//
//	1  SET order:{id} NX PX on each Redis node, a majority to win
//	   (lock.Locker, redsync); released by a script that deletes it only
//	   while it still holds this cancel's token
//	2  Cancel (orders.go): a pure function of the order as read, which
//	   returns the order to write or the refusal
//	3  SELECT the order, then UPDATE orders … WHERE id = $1 AND version
//	   = $2 (Store.Update): 0 rows is ErrVersionConflict
//	4  INSERT INTO stock_releases (order_id, …) with the stock's return:
//	   a second is refused by stock_releases_pkey (ErrAlreadyReleased),
//	   and the order is read again and answered as it is

// Flow names, the "flow" label of the conflict counter.
const (
	// FlowCreate is exported for the idempotency middleware on the create
	// route (idempotency.Store.Atomic), so both count under one name.
	FlowCreate = "create_order"
	flowCancel = "cancel_order"
	flowExpire = "expire_order"
)

// The steps the order flows take in their transactions. Each is an
// interface so that a layer test can take one layer off by handing in a
// variant of the production step (harness/variants); production leaves
// them nil in Config, and gets the ones named here.
type (
	// OrderRows are the orders' rows: *Store (postgres.go).
	OrderRows interface {
		Get(ctx context.Context, id string) (Order, error)
		Look(ctx context.Context, id string, change Change) (Order, error)
		// QueueGet is for a flow that reads the order in its
		// transaction, behind a lock taken in the same round trip
		// (package refunds).
		QueueGet(b *pgx.Batch, id string, o *Order)
		Update(ctx context.Context, tx pgx.Tx, id string, change Change) (o Order, moved bool, err error)
		QueueMove(ctx context.Context, b *pgx.Batch, known Order, change Change) (o Order, moved bool, err error)
		ExpireDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int, change Change) (int, error)
		QueueLock(b *pgx.Batch, id string)
		QueueFulfilled(b *pgx.Batch, orderID, eventID string, now time.Time)
	}
	// Stock is the stock an order takes: *inventory.Store's Take, the
	// conditional decrement.
	Stock interface {
		Take(ctx context.Context, tx pgx.Tx, lines []inventory.Line) (map[string]int64, error)
	}
)

// Config holds what the service is built from.
type Config struct {
	DB       *pgxpool.Pool // the flows' transactions, and the reads of the store
	Locker   layers.Locker
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	OrderTTL time.Duration
	Now      func() time.Time

	// The steps; nil is production's (NewStore(DB), inventory.NewStore,
	// outbox.NewInbox).
	Orders OrderRows
	Stock  Stock
	Inbox  outbox.Inbox // the fulfilment's
}

// Service runs the order flows. Each reads top to bottom in layer order.
type Service struct {
	db                             *pgxpool.Pool
	store                          *Store
	orders                         OrderRows
	stock                          Stock
	inbox                          outbox.Inbox
	create, cancel, expire, fulfil layers.Flow
	metrics                        *metrics.Metrics
	logger                         *slog.Logger
	ttl                            time.Duration
	now                            func() time.Time
}

// NewService returns the order service.
func NewService(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Locker == nil {
		return nil, errors.New("orders: a pool and a locker are required")
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
	store := NewStore(cfg.DB)
	if cfg.Orders == nil {
		cfg.Orders = store
	}
	if cfg.Stock == nil {
		cfg.Stock = inventory.NewStore(cfg.DB, cfg.Now)
	}
	if cfg.Inbox == nil {
		cfg.Inbox = outbox.NewInbox(cfg.DB)
	}
	flow := layers.Flows("order", cfg.Locker, cfg.Metrics)
	return &Service{db: cfg.DB, store: store, orders: cfg.Orders, stock: cfg.Stock, inbox: cfg.Inbox,
		create: flow(FlowCreate), cancel: flow(flowCancel), expire: flow(flowExpire), fulfil: flow(flowFulfil),
		metrics: cfg.Metrics, logger: cfg.Logger, ttl: cfg.OrderTTL, now: cfg.Now}, nil
}

// Create places an order for userID: every line's stock is reserved, or
// none is. requestKey is the client's Idempotency-Key; placing the same
// request twice returns the first order, and the key sent with other
// items is idempotency_key_reused.
func (s *Service) Create(ctx context.Context, userID, requestKey string, lines []inventory.Line) (Order, error) {
	if err := ValidateLines(lines); err != nil {
		return Order{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Order{}, fmt.Errorf("new order id: %w", err)
	}
	now := s.stamp()
	o := Order{ID: id.String(), UserID: userID, RequestKey: requestKey, Status: StatusPendingPayment,
		Version: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(s.ttl)}
	// Layer 0: the key's record, when the route has the layer (Atomic).
	rec := idempotency.RecordFrom(ctx)
	// Layer 1: lock the business request (user + key), never the products:
	// a lock on a hot SKU would queue every buyer of a flash sale behind
	// Redis; the stock row itself serialises them, far more cheaply. With
	// a record the claim below takes pg_try_advisory_xact_lock on this
	// very (user, key), and a copy of the request is refused at once; a
	// Redis lock on the same key would add six round trips and guard
	// nothing more. Without one (a caller with no key's record), Redis.
	var keys []string
	if rec == nil {
		keys = []string{"order:" + userID + ":" + requestKey}
	}
	err = s.create.LockAll(ctx, keys, func(ctx context.Context) error {
		// One transaction, three round trips (postgres.InTxBatched):
		return postgres.InTxBatched(ctx, s.db,
			// Layer 0: BEGIN and the key's claim (the try-lock on (user,
			// key) and INSERT INTO idempotency_keys … ON CONFLICT DO
			// UPDATE). A copy of a request in flight is refused here
			// (request_in_progress), a completed one gets its stored
			// answer, before either takes a product's row lock.
			rec.QueueClaim,
			func(tx pgx.Tx) (*pgx.Batch, error) {
				// Layer 3: each line's conditional decrement (UPDATE
				// products SET stock_available = stock_available - qty
				// WHERE sku AND stock_available >= qty), with layer 4
				// behind it (CHECK stock_available >= 0): out_of_stock.
				prices, err := s.stock.Take(ctx, tx, lines)
				if err != nil {
					return nil, err
				}
				o.Items, o.TotalCents = priceItems(lines, prices)
				// Layer 4: the order (INSERT INTO orders) under UNIQUE
				// (user_id, request_key), and layer 0's answer with it
				// (UPDATE idempotency_keys … WHERE owner), travelling
				// with COMMIT:
				// the order and the answer that replays it commit
				// together or not at all.
				last := &pgx.Batch{}
				QueueInsert(last, o)
				return last, rec.QueueComplete(last, created(o))
			})
	})
	switch {
	case postgres.ConstraintViolated(err) == ConstraintUserRequestKey:
		// The order was placed by an earlier request with the key, one
		// whose record is gone (swept) or that ran without layer 0: it is
		// the answer, if this request asks for what it holds.
		s.create.Stopped(ctx, layers.Constraint)
		placed, err := s.store.ByRequestKey(ctx, userID, requestKey)
		if err == nil && !placed.Holds(lines) {
			return Order{}, ErrKeyReused
		}
		return placed, err
	case errors.Is(err, inventory.ErrStockConstraint):
		// Before ErrOutOfStock, which it comes with: a problem matches
		// errors.Is by its code, whatever its detail says.
		s.create.Stopped(ctx, layers.Constraint)
	case errors.Is(err, inventory.ErrOutOfStock):
		s.create.Stopped(ctx, layers.Version)
	}
	if err != nil {
		return Order{}, err
	}
	return o, nil
}

// Cancel cancels one of userID's orders and returns its stock, once.
// Cancelling a cancelled order returns it unchanged.
func (s *Service) Cancel(ctx context.Context, userID, id string) (Order, error) {
	if !ids.Valid(id) {
		return Order{}, ErrNotFound
	}
	var out Order
	// Layer 1: one cancel of this order at a time, across replicas: the
	// Redis lock order:{id} (SET NX PX on a majority of the nodes); held
	// by another cancel, 409 resource_busy.
	err := s.cancel.Lock(ctx, "order:"+id, func(ctx context.Context) error {
		return s.cancel.Retry(ctx, func(int) error {
			var moved bool
			err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
				// Layer 2: Cancel decides what a cancel means for the order
				// as read (refused: 409 invalid_state); layer 3: Update
				// writes it at the version read (UPDATE orders … WHERE id
				// AND version; 0 rows: ErrVersionConflict, read again);
				// layer 4: stock_releases admits one return of its stock
				// (INSERT INTO stock_releases; a second:
				// ErrAlreadyReleased, the order answered as it is).
				var err error
				out, moved, err = s.orders.Update(ctx, tx, id, Cancel(userID, s.stamp()))
				return err
			})
			switch {
			case errors.Is(err, ErrVersionConflict):
				return layers.Lost(layers.Version, err)
			case errors.Is(err, ErrAlreadyReleased):
				s.cancel.Stopped(ctx, layers.Constraint)
				out, err = s.store.Get(ctx, id)
				return err
			case errors.Is(err, ErrInvalidState), err == nil && !moved:
				// A cancel the order refused (any invalid_state problem
				// is ErrInvalidState: problem.Error's Is compares codes),
				// or had no need of.
				s.cancel.Stopped(ctx, layers.State)
			}
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

// stamp is the time now as PostgreSQL keeps it.
func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
