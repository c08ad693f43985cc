package refunds

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
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the refund flow, where each one is:
//
//	layer           where                                       backed by
//	0 idempotency   the key's record, claimed in the begin's    idempotency_keys (begin, settle),
//	                transaction, completed in the settle's;     Store.QueueOfRequest,
//	                (order, key) on the refund's row, read      refunds_order_request_key
//	                under the lock: a copy finds its refund
//	1 lock          pg_advisory_xact_lock on refund:{order}, in Store.QueueLockOrder
//	                the begin's first round trip, to its COMMIT
//	2 state         the order: paid or fulfilled, the amount    orders.Refund, RefundSucceeded,
//	                within what is left; the refund:            RefundFailed; Refund.Succeed, Fail
//	                processing → succeeded or failed, once
//	3 version       the order written at the version read       orders.Store.QueueMove;
//	                (begin) or known (settle), what its         Store.QueueSettle
//	                refunds hold moved by the amount; the
//	                refund's row at its version, first
//	4 constraint    an order's refunds within its total, its    orders_refunded_within_total,
//	                returns within what was bought; one refund  order_items_returned_within_quantity,
//	                per (order, key); a processor refund        refunds_order_request_key,
//	                settles one refund                          refunds_processor_refund_id_key
//	+ processor key the refund's id is the processor's          payments.Gateway.Refund
//	                Idempotency-Key: one refund there per refund
//
// What the client is answered when a layer refuses (the codes' statuses
// are httpx/errors.go's one table):
//
//	0  a copy still running: 409 request_in_progress; a finished one: its
//	   answer again; the key with another amount or items: 422
//	   idempotency_key_reused
//	1  waits for the refund of the order in front of it to begin (its
//	   first transaction, not its call to the processor), within the
//	   request's budget; past it, 503 unavailable, nothing written
//	2  an order not paid or fulfilled: 409 invalid_state; more than is
//	   left to refund: 422 refund_exceeds_remaining; units not bought:
//	   400 invalid_request
//	3  the order moved since read: read again; in the begin 3 tries,
//	   then 409 resource_busy; in the settle 3 tries, then 202 with the
//	   refund processing, for the reconciler. The refund's own row
//	   moved: another settler recorded it first, and its outcome is the
//	   answer
//	4  the totals' CHECKs: 422 refund_exceeds_remaining (units beyond
//	   what was bought: 400 invalid_request), nothing written; a second
//	   refund of the request: read again, and layer 0 answers; a processor
//	   refund already settling another refund
//	   (refunds_processor_refund_id_key): 500 internal, nothing written
//	processor  refused: 409 invalid_state, the refund failed and the
//	           order's amount released; no answer: 202 with the refund
//	           processing, settled by the reconciler
//
// What each layer runs, in the order a refund meets them (the SQL is in
// postgres.go and orders/postgres.go, the rules in orders/orders.go):
//
//	1  SELECT pg_advisory_xact_lock(hashtextextended('refund:' || order, 0))
//	0  pg_try_advisory_xact_lock on the key, then INSERT INTO
//	   idempotency_keys … ON CONFLICT DO UPDATE … RETURNING (the first
//	   claim; a later transaction of the same request claims again with
//	   INSERT … ON CONFLICT DO NOTHING and a SELECT of the row, which
//	   writes nothing while the claim is its own);
//	   the refund of (order, key) read (SELECT … FROM refunds WHERE
//	   order_id AND request_key); UPDATE idempotency_keys SET
//	   status_code, body … WHERE owner = the claim's token (complete)
//	2  orders.Refund, RefundSucceeded, RefundFailed: pure functions of
//	   the order as read, each returning the order to write or the
//	   refusal
//	3  UPDATE orders … WHERE id = $1 AND version = $2 (with UPDATE
//	   order_items SET returned for the units), and UPDATE refunds …
//	   WHERE id = $1 AND version = $2: 0 rows is orders.ErrVersionConflict,
//	   ErrVersionConflict
//	4  the CHECKs orders_refunded_within_total
//	   (orders.ErrRefundedBeyondTotal) and
//	   order_items_returned_within_quantity
//	   (orders.ErrReturnedBeyondQuantity) on those UPDATEs; INSERT INTO
//	   refunds under refunds_order_request_key (ErrDuplicateRequest);
//	   the settle's UPDATE under refunds_processor_refund_id_key
//	   (ErrProcessorRefundSettled), its order.refunded under
//	   outbox_one_per_event (read as ErrVersionConflict: another settler
//	   wrote it)
//
// What one refund costs (auth's round trip aside): three round trips to
// begin (BEGIN with the lock, the claim and the reads; the order's write,
// whose zero rows are checked before COMMIT is sent; the refund's insert
// with COMMIT), the processor's call, and two to settle (BEGIN with the
// claim, the refund's and the order's writes; the answer with COMMIT):
// five round trips, two commits, and no Redis.

// FlowRefund names the refund flow in the conflict counter; the
// idempotency middleware on the route counts under it too.
const FlowRefund = "refund_order"

// The steps the refund flow takes in its transactions, each an interface
// so that a layer test can take one layer off by handing in a variant
// (harness/variants); production leaves them nil in Config and gets the
// ones named here.
type (
	// OrderRows are the orders the flow moves: *orders.Store.
	OrderRows interface {
		Get(ctx context.Context, id string) (orders.Order, error)
		QueueGet(b *pgx.Batch, id string, o *orders.Order)
		QueueMove(ctx context.Context, b *pgx.Batch, known orders.Order, change orders.Change) (o orders.Order, moved bool, err error)
	}
	// RefundRows are the refunds' writes and the order's lock: *Store.
	RefundRows interface {
		QueueLockOrder(b *pgx.Batch, orderID string)
		QueueInsert(b *pgx.Batch, r Refund)
		QueueSettle(b *pgx.Batch, settled Refund, version int64)
	}
)

// Config holds what the service is built from.
type Config struct {
	DB      *pgxpool.Pool // the flow's transactions, and the store's reads
	Gateway *payments.Gateway
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Budget bounds one refund from its begin to its recorded outcome,
	// the processor's retries included. The client hanging up does not
	// cut it short: a refund, once sent, is carried through to its
	// record.
	Budget time.Duration
	// ReconcileAfter is how long a refund stays processing before the
	// reconciler asks the processor about it; longer than Budget, so it
	// leaves alone the refunds whose requests are still running.
	ReconcileAfter time.Duration

	// The steps; nil is production's (orders.NewStore(DB), NewStore(DB)).
	Orders  OrderRows
	Refunds RefundRows
}

// Service runs the refund flow and its reconciler.
type Service struct {
	db                *pgxpool.Pool
	store             *Store
	payments          *payments.Store
	orders            OrderRows
	refunds           RefundRows
	gateway           *payments.Gateway
	refund, reconcile layers.Flow
	metrics           *metrics.Metrics
	counts            *counters
	logger            *slog.Logger
	now               func() time.Time
	budget            time.Duration
	reconcileAfter    time.Duration
}

// NewService returns the refund service.
func NewService(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Gateway == nil {
		return nil, errors.New("refunds: a pool and a gateway are required")
	}
	if cfg.Budget <= 0 || cfg.ReconcileAfter <= 0 {
		return nil, fmt.Errorf("refunds: budget and reconcile delay must be positive, got %s and %s", cfg.Budget, cfg.ReconcileAfter)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	store := NewStore(cfg.DB)
	if cfg.Orders == nil {
		cfg.Orders = orders.NewStore(cfg.DB)
	}
	if cfg.Refunds == nil {
		cfg.Refunds = store
	}
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	// No Redis lock: the flow's lock is its transaction's (layer 1 above).
	flow := layers.Flows("order", nil, cfg.Metrics)
	return &Service{db: cfg.DB, store: store, payments: payments.NewStore(cfg.DB), orders: cfg.Orders, refunds: cfg.Refunds,
		gateway: cfg.Gateway, refund: flow(FlowRefund), reconcile: flow(jobReconcile),
		metrics: cfg.Metrics, counts: counts, logger: cfg.Logger, now: cfg.Now,
		budget: cfg.Budget, reconcileAfter: cfg.ReconcileAfter}, nil
}

// standing is the order as the flow last knew it, what its refunds that
// succeeded came to then, and the charge they give back.
type standing struct {
	order     orders.Order
	succeeded int64
	charge    string
}

// Refund gives back part or all of what an order was charged, as by
// asks: begin, the processor, settle. requestKey is the client's
// Idempotency-Key: a request sent again after a first try whose begin
// committed (its answer lost) carries that try's refund on, and gets its
// outcome. It returns the refund with:
//
//   - nil: succeeded, the money went back (and the order is refunded if
//     its refunds that succeeded now cover its total);
//   - an error wrapping ErrOutcomeUnknown: still processing; the
//     reconciler settles it;
//   - an invalid_state problem: the order cannot be refunded (never paid,
//     being paid, cancelled, expired, or refunded), or the processor
//     refused the refund and nothing was given back;
//   - a refund_exceeds_remaining problem: more than the order has left;
//   - an invalid_request problem: a malformed request, or units the order
//     does not hold to return; a not_found one for another user's order.
//
// Nothing is changed by a refusal.
func (s *Service) Refund(ctx context.Context, by orders.Refunder, requestKey, orderID string, req Request) (Refund, error) {
	if requestKey == "" {
		return Refund{}, problem.New(problem.IdempotencyRequired, "Idempotency-Key: required on this route")
	}
	if err := req.Validate(); err != nil {
		s.counts.result(resultRefused)
		return Refund{}, err
	}
	if !ids.Valid(orderID) {
		return Refund{}, ErrNotFound
	}
	// Layer 0: the request's idempotency record, when the route has the
	// layer (idempotency.Store.Atomic). The begin's transaction claims it,
	// and the settle's completes it with the answer.
	rec := idempotency.RecordFrom(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.budget)
	defer cancel()

	// 1. Begin: the processing refund, its amount held on the order.
	r, known, err := s.begin(ctx, by, requestKey, orderID, req, rec)
	if err != nil {
		if problem.CodeOf(err) != "" && !errors.Is(err, ErrNotFound) {
			s.counts.result(resultRefused)
		}
		return Refund{}, err
	}
	if r.Status != StatusProcessing {
		// The request's own refund, begun by an earlier try and settled
		// since: its outcome.
		return r, Outcome(r)
	}
	// 2. The processor, with no transaction open; 3. settle.
	return s.give(ctx, r, known, rec)
}

// begin opens the processing refund that the processor will settle, and
// holds its amount and the units it returns on its order: one
// transaction, three round trips. It returns the refund and the order as
// written; or, when the request began its refund before (a retry whose
// first try committed, or a copy that got past the key's claim), that
// refund as it stands and the order as read.
func (s *Service) begin(ctx context.Context, by orders.Refunder, requestKey, orderID string, req Request, rec *idempotency.Record) (Refund, standing, error) {
	var r Refund
	var known standing
	err := s.refund.Retry(ctx, func(attempt int) error {
		var (
			now       time.Time // stamped under the lock, after the order is read
			o         orders.Order
			mine      Refund // the request's refund, begun before
			captured  payments.Payment
			succeeded int64
			asked     int64 // what the rule held on the order
		)
		err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
			// Round trip 1, with BEGIN. Layer 1: the order's advisory
			// lock, to COMMIT: the order's refunds begin one at a time,
			// each reading what the one before held. It waits at most for
			// another refund's begin, which has nothing outside the
			// database in it.
			s.refunds.QueueLockOrder(b, orderID)
			// Layer 0: the claim of the request's key (the try-lock on the
			// key and INSERT INTO idempotency_keys … ON CONFLICT DO
			// UPDATE): a copy of the request in flight is refused here, 409
			// request_in_progress. Behind the lock, so that
			// a refused copy holds the key's own lock only for the moment
			// it takes to roll back, never while it waits: the request
			// that owns the key claims it again to settle.
			rec.QueueClaim(b)
			// Under the lock: the order, the request's own refund, what
			// the order's refunds that succeeded come to, and the payment
			// whose charge they give back.
			s.orders.QueueGet(b, orderID, &o)
			s.store.QueueOfRequest(b, orderID, requestKey, &mine)
			s.store.QueueSucceeded(b, orderID, &succeeded)
			s.payments.QueueCaptured(b, orderID, &captured)
		}, func(tx pgx.Tx) (*pgx.Batch, error) {
			if !by.May(o) {
				return nil, ErrNotFound // someone else's order does not exist for by
			}
			// The refund's time is taken here, after the order was read
			// under the lock: it is never before the payment it gives
			// back, or an earlier refund of the order, was written.
			now = s.stamp()
			known = standing{order: o, succeeded: succeeded, charge: captured.ChargeID}
			if mine.ID != "" {
				// Layer 0 in the database: the request began its refund
				// before. That refund is the answer, carried on if it is
				// still processing; a settled one completes the key.
				r = mine
				return s.resumed(mine, by, req, rec)
			}
			// Round trip 2. Layer 2: only a paid or fulfilled order of
			// the refunder's, for at most what it has left, and returns
			// of what it holds (orders.Refund; refused: 409 invalid_state,
			// 422 refund_exceeds_remaining, 400 invalid_request). Layer 3:
			// written at the version read (UPDATE orders … WHERE id AND
			// version), what its refunds hold moved by the amount; 0 rows
			// is orders.ErrVersionConflict, read again. Layer 4: the
			// CHECKs on refunded_cents and returned
			// (orders.ErrRefundedBeyondTotal, ErrReturnedBeyondQuantity).
			// Sent before COMMIT: a write that matched no row must stop
			// the transaction.
			second := &pgx.Batch{}
			held, _, err := s.orders.QueueMove(ctx, second, o, orders.Refund(req.ask(by), now))
			if err != nil {
				return nil, err
			}
			asked = held.RefundedCents - o.RefundedCents
			if err := orders.WriteError(tx.SendBatch(ctx, second).Close()); err != nil {
				return nil, err
			}
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("new refund id: %w", err)
			}
			r = Refund{ID: id.String(), OrderID: orderID, RequestKey: requestKey, RequestedBy: requester(by),
				AmountCents: asked, Status: StatusProcessing, Reason: req.Reason, Items: inventory.BySKU(req.Items),
				Version: 1, CreatedAt: now, UpdatedAt: now}
			known.order = held
			// Round trip 3. Layer 4: the refund's row (INSERT INTO
			// refunds), one per request (refunds_order_request_key:
			// ErrDuplicateRequest, and the next try answers the copy's
			// refund); and COMMIT.
			last := &pgx.Batch{}
			s.refunds.QueueInsert(last, r)
			return last, nil
		})
		err = InsertError(err)
		switch {
		case errors.Is(err, orders.ErrVersionConflict):
			return layers.Lost(layers.Version, err)
		case errors.Is(err, ErrDuplicateRequest):
			// A copy of the request got past the claim, the lock and the
			// version check, and began the refund first: the next try
			// reads it and answers it.
			return layers.Lost(layers.Constraint, err)
		case errors.Is(err, orders.ErrRefundedBeyondTotal), errors.Is(err, orders.ErrReturnedBeyondQuantity):
			// What got past the rule and the version check stops here:
			// the answer is what the rule would have said.
			s.refund.Stopped(ctx, layers.Constraint)
			return s.beyond(ctx, err, orderID, asked)
		case errors.Is(err, ErrNotFound), errors.Is(err, orders.ErrNotFound), errors.Is(err, errKeyReused):
		case problem.CodeOf(err) != "":
			// A refund the order's rule refused.
			s.refund.Stopped(ctx, layers.State)
		}
		return err
	})
	if errors.Is(err, orders.ErrNotFound) {
		return Refund{}, standing{}, ErrNotFound
	}
	if err != nil {
		return Refund{}, standing{}, err
	}
	return r, known, nil
}

// resumed answers a request that began its refund mine before: the same
// request, or idempotency_key_reused. A settled refund completes the key
// with its answer in the transaction that claimed it (nil: COMMIT
// alone).
func (s *Service) resumed(mine Refund, by orders.Refunder, req Request, rec *idempotency.Record) (*pgx.Batch, error) {
	if !req.asks(mine, by) {
		return nil, errKeyReused
	}
	if mine.Status != StatusSucceeded {
		return nil, nil
	}
	last := &pgx.Batch{}
	return last, rec.QueueComplete(last, created(mine))
}

// beyond answers a refund that a constraint refused (err) after the rule
// let it through: what the rule says of the order as it is now.
func (s *Service) beyond(ctx context.Context, err error, orderID string, asked int64) error {
	if errors.Is(err, orders.ErrReturnedBeyondQuantity) {
		return problem.New(problem.Invalid, "items: more units asked back than were bought and not yet returned")
	}
	o, gerr := s.orders.Get(ctx, orderID)
	if gerr != nil {
		return gerr
	}
	return orders.ExceedsRemaining(o, asked)
}

// give sends r to the processor and records what it answered (settle).
// The call is made outside any transaction, keyed by the refund's id: the
// request, its retries and the reconciler all send the same key, and the
// processor refunds once. known is the order as begun, or as last read.
//
// Once the refund has been sent, every way out of here either records an
// outcome or leaves the refund processing with ErrOutcomeUnknown (202 to
// the client, and the reconciler finishes the work).
func (s *Service) give(ctx context.Context, r Refund, known standing, rec *idempotency.Record) (Refund, error) {
	if known.charge == "" {
		// A paid order's payment is always there; without it nothing can
		// be given back, and the order gets back what the refund held.
		failed := r
		if err := failed.Fail("the order has no captured charge to refund", s.stamp()); err != nil {
			return r, err
		}
		return s.settle(ctx, r, failed, known, rec)
	}
	pr, err := s.gateway.Refund(ctx, r.ID, known.charge, r.AmountCents)
	var refused *payments.RefundRefusedError
	switch {
	case errors.As(err, &refused):
		// Nothing was given back: the refund fails, and the order gets
		// back what it held.
		failed := r
		if err := failed.Fail(refused.Detail, s.stamp()); err != nil {
			return r, err
		}
		return s.settle(ctx, r, failed, known, rec)
	case err != nil:
		s.counts.result(resultUnknown)
		s.logger.WarnContext(ctx, "refund outcome unknown; the reconciler will settle it", "refund", r.ID, "err", err)
		return r, fmt.Errorf("refund %s: %w: %w", r.ID, ErrOutcomeUnknown, err)
	}
	succeeded := r
	if err := succeeded.Succeed(pr.ID, s.stamp()); err != nil {
		return r, err
	}
	return s.settle(ctx, r, succeeded, known, rec)
}

// settle records settled, the outcome of the processing refund r, and
// moves its order, in one transaction of two round trips. The refund's
// own row decides first: when another settler recorded an outcome since r
// was read, that outcome is the answer, and nothing else is written. A
// refund that succeeded returns its units' stock and announces
// order.refunded; one that failed gives the order back what it held.
// When the database does not answer within the budget, nothing is
// recorded: r stays processing for the reconciler.
func (s *Service) settle(ctx context.Context, r, settled Refund, known standing, rec *idempotency.Record) (Refund, error) {
	err := s.refund.Retry(ctx, func(attempt int) error {
		if attempt > 1 {
			// The order as it is now: it moved since it was known.
			var err error
			if known, err = s.standing(ctx, r.OrderID, known.charge); err != nil {
				return err
			}
		}
		now := s.stamp()
		// Round trip 1. Layer 0: BEGIN and the request's claim again:
		// still its own, or taken over after its lease ran out, and then
		// this stale settle is refused before it writes anything.
		first := &pgx.Batch{}
		rec.QueueClaim(first)
		// Layer 3: the refund's own row first, at the version read
		// (UPDATE refunds … WHERE id AND version); its row lock makes
		// every other settler wait for this one, and 0 rows
		// (ErrVersionConflict) means another settler recorded it: its
		// outcome is the answer. Layer 4: a processor refund settles one
		// refund (refunds_processor_refund_id_key: 500, nothing written).
		s.refunds.QueueSettle(first, settled, r.Version)
		// Layer 2: the order's rule (RefundSucceeded, RefundFailed);
		// layer 3: at the version known (UPDATE orders … WHERE id AND
		// version; moved since: read again, 3 tries, then 202 processing,
		// for the reconciler). The order is written either way, so of two
		// refunds settling at once the second decides on what the first
		// wrote.
		move := orders.RefundFailed(r.AmountCents, r.Items, now)
		if settled.Status == StatusSucceeded {
			move = orders.RefundSucceeded(known.succeeded+r.AmountCents, now)
		}
		written, _, err := s.orders.QueueMove(ctx, first, known.order, move)
		if err != nil {
			if cur, gerr := s.store.Get(ctx, r.ID); gerr == nil && cur.Status != StatusProcessing {
				settled = cur // another settler recorded it
				return nil
			}
			return err
		}
		if settled.Status == StatusSucceeded {
			// The returned units' stock comes back, once: with the
			// refund's one move out of processing. order.refunded commits
			// with it or not at all (outbox_one_per_event: one per refund).
			inventory.QueueReturn(first, r.Items)
			e, err := refundedEvent(settled, written)
			if err != nil {
				return err
			}
			if err := outbox.Queue(ctx, first, e); err != nil {
				return err
			}
		}
		// Round trip 2: a success completes the key with its answer, and
		// COMMIT.
		last := &pgx.Batch{}
		if settled.Status == StatusSucceeded {
			if err := rec.QueueComplete(last, created(settled)); err != nil {
				return err
			}
		}
		err = SettleError(postgres.InTxSend(ctx, s.db, first, last))
		if !errors.Is(err, ErrVersionConflict) && !errors.Is(err, ErrProcessorRefundSettled) {
			err = orders.WriteError(err)
		}
		switch {
		case errors.Is(err, ErrVersionConflict):
			s.refund.Stopped(ctx, layers.Version)
			settled, err = s.recorded(ctx, r)
			return err
		case errors.Is(err, orders.ErrVersionConflict) && attempt < layers.MaxTries:
			return layers.Lost(layers.Version, err)
		case errors.Is(err, orders.ErrVersionConflict):
			// The order changed under every try: the refund may have gone
			// through, so the answer is not busy but unknown, for the
			// reconciler.
			s.refund.Stopped(ctx, layers.Version)
			return fmt.Errorf("record refund %s: %w: %w", r.ID, ErrOutcomeUnknown, err)
		case errors.Is(err, ErrProcessorRefundSettled):
			return fmt.Errorf("settle refund %s with processor refund %s: %w", r.ID, settled.ProcessorRefundID, err)
		case err != nil && problem.CodeOf(err) == "":
			return fmt.Errorf("record refund %s: %w: %w", r.ID, ErrOutcomeUnknown, err)
		}
		return err
	})
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		s.counts.result(resultUnknown)
		s.logger.WarnContext(ctx, "refund outcome not recorded; the reconciler will record it", "refund", r.ID, "err", err)
		return r, err
	case err != nil:
		return r, err
	}
	s.counts.result(string(settled.Status))
	return settled, Outcome(settled)
}

// standing reads the order as it is now and then what its refunds that
// succeeded come to, in one round trip: a refund that settled in between
// is in the second if it is in the first.
func (s *Service) standing(ctx context.Context, orderID, charge string) (standing, error) {
	st := standing{charge: charge}
	b := &pgx.Batch{}
	s.orders.QueueGet(b, orderID, &st.order)
	s.store.QueueSucceeded(b, orderID, &st.succeeded)
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return standing{}, err
	}
	return st, nil
}

// recorded returns the refund as another settler recorded it.
func (s *Service) recorded(ctx context.Context, r Refund) (Refund, error) {
	cur, err := s.store.Get(ctx, r.ID)
	if err != nil {
		return r, fmt.Errorf("read refund %s: %w: %w", r.ID, ErrOutcomeUnknown, err)
	}
	return cur, nil
}

// Refunds returns the refunds of one of by's orders, oldest first.
func (s *Service) Refunds(ctx context.Context, by orders.Refunder, orderID string) ([]Refund, error) {
	if !ids.Valid(orderID) {
		return nil, ErrNotFound
	}
	o, err := s.orders.Get(ctx, orderID)
	if err != nil || !by.May(o) {
		return nil, ErrNotFound
	}
	return s.store.OfOrder(ctx, orderID)
}

// EventBody is the body of order.refunded: one refund that succeeded.
type EventBody struct {
	RefundID      string        `json:"refund_id"`
	OrderID       string        `json:"order_id"`
	UserID        string        `json:"user_id"`
	AmountCents   int64         `json:"amount_cents"`
	Reason        string        `json:"reason,omitempty"`
	Items         []EventItem   `json:"items,omitempty"`
	OrderStatus   orders.Status `json:"order_status"`
	RefundedCents int64         `json:"refunded_cents"`
	TotalCents    int64         `json:"total_cents"`
}

// EventItem is one returned line of order.refunded.
type EventItem struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// refundedEvent is order.refunded of r, whose order moved to o: its
// subject is the refund, so each refund is announced once.
func refundedEvent(r Refund, o orders.Order) (outbox.Event, error) {
	body := EventBody{RefundID: r.ID, OrderID: r.OrderID, UserID: o.UserID, AmountCents: r.AmountCents, Reason: r.Reason,
		OrderStatus: o.Status, RefundedCents: o.RefundedCents, TotalCents: o.TotalCents}
	for _, l := range r.Items {
		body.Items = append(body.Items, EventItem{SKU: l.SKU, Quantity: l.Quantity})
	}
	return outbox.New(outbox.OrderRefunded, r.ID, r.UpdatedAt, body)
}

func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
