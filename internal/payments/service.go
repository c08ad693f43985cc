package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the pay flow, where each one is:
//
//	layer           where                                       backed by
//	0 idempotency   the key's record, claimed in the begin's    idempotency_keys (begin, settle),
//	                transaction, completed in the settle's;     payments_order_request_key
//	                (order, key) on the payment's row
//	1 lock          payment:{order}, held across the gateway    Pay, reconcileOne; LockTries
//	                call under the watchdog; a click that
//	                finds it held is refused, not queued
//	2 state         the order: pending_payment → paying →       orders.BeginPayment, Pay,
//	                paid; the payment: processing → settled     PaymentEnded; Payment.Succeed, …
//	3 version       the order written at the version read       orders.Store.QueueMove;
//	                (begin) and begun (settle); the payment's   Store.QueueSettle
//	                row at its version, first
//	4 constraint    one processing-or-succeeded payment per     payments_one_active_per_order,
//	                order; a charge settles one payment         payments_charge_id_key
//	+ gateway key   the payment id is the gateway's             Gateway.Charge, Refund
//	                Idempotency-Key: one charge per payment
//
// What the client is answered when a layer refuses (the codes' statuses
// are httpx/errors.go's one table):
//
//	0  a copy still running: 409 request_in_progress; a finished one: its
//	   answer again; the key with another method: 422
//	   idempotency_key_reused
//	1  the lock held by another click: 409 resource_busy, Retry-After (by
//	   a copy of this request: request_in_progress, as 0)
//	2  an order being paid: 409 resource_busy, with payments_url; paid,
//	   cancelled, expired: 409 invalid_state (asked first of the order as
//	   read, without the lock, and again in the begin)
//	3  the order moved since read: read again; in the begin 3 tries,
//	   then 409 resource_busy; in the settle 3 tries, then 202 with the
//	   payment processing, for the reconciler (the charge may have gone
//	   through). The payment's own row moved: another settler (the
//	   reconciler) recorded it first, and its outcome is the answer
//	4  another payment active: as 2; a charge the gateway gave for a
//	   payment already settled by it (payments_charge_id_key): 500
//	   internal, nothing written (the gateway broke its own key)
//	gateway  declined: 402 payment_declined, the order payable again; no
//	         answer: 202 with the payment processing, settled by the
//	         reconciler (reconcile.go)
//
// What each layer runs, in the order a payment meets them (the SQL is in
// postgres.go and orders/postgres.go, the rules in orders/orders.go):
//
//	1  SET payment:{order} NX PX on each Redis node, a majority to win
//	   (lock.Locker, redsync); released by a script that deletes it only
//	   while it still holds this payment's token
//	0  pg_try_advisory_xact_lock on the key, then INSERT INTO
//	   idempotency_keys … ON CONFLICT DO UPDATE … RETURNING (the first
//	   claim; a later transaction of the same request claims again with
//	   INSERT … ON CONFLICT DO NOTHING and a SELECT of the row, which
//	   writes nothing while the claim is its own);
//	   UPDATE idempotency_keys SET status_code, body … WHERE owner = the
//	   claim's token (complete), in the same transactions as the work
//	2  orders.BeginPayment, Pay, PaymentEnded: pure functions of the
//	   order as read, each returning the order to write or the refusal
//	3  UPDATE orders … WHERE id = $1 AND version = $2, and UPDATE
//	   payments … WHERE id = $1 AND version = $2: 0 rows is
//	   orders.ErrVersionConflict, ErrVersionConflict
//	4  INSERT INTO payments under payments_one_active_per_order
//	   (ErrActivePayment) and payments_order_request_key
//	   (ErrDuplicateRequest); the settle's UPDATE under
//	   payments_charge_id_key (ErrChargeSettled)
//
// What one payment costs the winner of its order (auth's round trip
// aside): the lock in Redis (SET NX on each node, and the release), the
// order's read, two round trips to begin (BEGIN with the claim and the
// order's write, then the payment's insert with COMMIT), the gateway's
// call, and two to settle (BEGIN with the claim, the payment's and the
// order's writes, then the answer with COMMIT): five round trips and two
// commits.

// FlowPay names the pay flow in the conflict counter; the idempotency
// middleware on the route counts under it too.
const FlowPay = "pay_order"

// LockTries bounds the attempts a payment makes on its order's lock
// before resource_busy (lock.Locker.WithTries). The holder keeps the lock
// across its gateway call, so a click that finds it held (taken on every
// node) is told so after one attempt instead of queueing behind the
// charge; the attempts past the first get contenders that arrived
// together past a split vote.
const LockTries = 3

// The steps the pay flow takes in its transactions, each an interface so
// that a layer test can take one layer off by handing in a variant
// (harness/variants); production leaves them nil in Config and gets the
// ones named here.
type (
	// OrderRows are the orders the flow moves: *orders.Store.
	OrderRows interface {
		Get(ctx context.Context, id string) (orders.Order, error)
		Look(ctx context.Context, id string, change orders.Change) (orders.Order, error)
		QueueMove(ctx context.Context, b *pgx.Batch, known orders.Order, change orders.Change) (o orders.Order, moved bool, err error)
	}
	// PaymentRows are the payments' writes: *Store.
	PaymentRows interface {
		QueueInsert(b *pgx.Batch, p Payment)
		QueueSettle(b *pgx.Batch, settled Payment, version int64)
		QueueDiscard(b *pgx.Batch, p Payment)
	}
)

// Config holds what the service is built from.
type Config struct {
	DB      *pgxpool.Pool // the flow's transactions, and the store's reads
	Gateway *Gateway
	Locker  layers.Locker
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Budget bounds one payment from the lock to the recorded outcome,
	// gateway retries included. The client hanging up does not cut it
	// short: a charge, once sent, is carried through to its record.
	Budget time.Duration
	// ReconcileAfter is how long a payment stays processing before the
	// reconciler asks the gateway about it; longer than Budget, so it
	// leaves alone the payments whose requests are still running.
	ReconcileAfter time.Duration

	// The steps; nil is production's (orders.NewStore(DB), NewStore(DB)).
	Orders   OrderRows
	Payments PaymentRows
}

// Service runs the pay flow and the reconciler.
type Service struct {
	db             *pgxpool.Pool
	store          *Store
	orders         OrderRows
	payments       PaymentRows
	gateway        *Gateway
	pay, reconcile layers.Flow
	metrics        *metrics.Metrics
	counts         *counters
	logger         *slog.Logger
	now            func() time.Time
	budget         time.Duration
	reconcileAfter time.Duration
}

// NewService returns the payment service.
func NewService(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Gateway == nil || cfg.Locker == nil {
		return nil, errors.New("payments: a pool, a gateway and a locker are required")
	}
	if cfg.Budget <= 0 || cfg.ReconcileAfter <= 0 {
		return nil, fmt.Errorf("payments: budget and reconcile delay must be positive, got %s and %s", cfg.Budget, cfg.ReconcileAfter)
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
	if cfg.Payments == nil {
		cfg.Payments = store
	}
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	flow := layers.Flows("order", cfg.Locker, cfg.Metrics)
	return &Service{db: cfg.DB, store: store, orders: cfg.Orders, payments: cfg.Payments, gateway: cfg.Gateway,
		pay: flow(FlowPay), reconcile: flow(jobReconcile),
		metrics: cfg.Metrics, counts: counts, logger: cfg.Logger, now: cfg.Now,
		budget: cfg.Budget, reconcileAfter: cfg.ReconcileAfter}, nil
}

// Pay charges one of userID's orders with method and, once the charge has
// gone through, marks the order paid: begin, charge, settle. requestKey
// is the client's Idempotency-Key: a request sent again after a first
// try whose begin committed (its answer lost) carries that try's payment
// on, and gets its outcome. It returns the payment with:
//
//   - nil: succeeded, the order is paid;
//   - a payment_declined problem: failed, the order can be paid again;
//   - an error wrapping ErrOutcomeUnknown: still processing; the
//     reconciler settles it;
//   - a resource_busy problem: another payment of the order is in flight
//     (or holds its lock); try again after its Retry-After;
//   - an invalid_state problem: the order cannot be paid, or it stopped
//     waiting while the charge was in flight and the charge was refunded;
//   - an invalid_request problem: the gateway refused the payment method;
//     nothing was charged and no payment is kept.
func (s *Service) Pay(ctx context.Context, userID, requestKey, orderID, method string) (Payment, error) {
	if requestKey == "" {
		return Payment{}, problem.New(problem.IdempotencyRequired, "Idempotency-Key: required on this route")
	}
	if err := ValidateMethod(method); err != nil {
		return Payment{}, err
	}
	if !ids.Valid(orderID) {
		return Payment{}, ErrNotFound
	}
	// Layer 0: the request's idempotency record, when the route has the
	// layer (idempotency.Store.Atomic). The transaction that begins the
	// payment claims it, and the one that records its success completes
	// it with the answer: the payment and its key commit together, in
	// each phase.
	rec := idempotency.RecordFrom(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.budget)
	defer cancel()

	// Layer 2, first, on the order as the database shows it now: a click
	// on an order that is being paid, or is paid, is answered from this
	// one read without going for the lock, whose holder keeps it across
	// its charge (a storm of clicks on it would only split its votes).
	// Only a payable order, or this request's own payment still to carry
	// on, goes for the lock. The rule is asked again, of the order the
	// begin writes.
	o, refusal := s.orders.Look(ctx, orderID, orders.BeginPayment(userID, s.stamp()))
	if o.ID == "" {
		return Payment{}, refusal // no such order, or the read failed
	}
	var mine Payment
	if refusal != nil {
		var err error
		if mine, err = s.refused(ctx, refusal, requestKey, o, method); err != nil {
			return Payment{}, err
		}
		if mine.Status != StatusProcessing {
			// The request's own payment has settled: its outcome, given
			// under the request's key.
			p, err := s.resume(ctx, mine, rec)
			if err != nil {
				return Payment{}, err
			}
			return p, Outcome(p)
		}
	}

	var out Payment
	ran := false
	// Layer 1: one payment of this order at a time, across replicas. The
	// lock is held across the gateway call; its watchdog extends the lease
	// while the call runs, and cancels the call if the lease is lost. It
	// serialises the winner's work, it is not the losers' queue: a click
	// that finds it held is told resource_busy at once (LockTries), not
	// after the winner's charge.
	err := s.pay.Lock(ctx, "payment:"+orderID, func(ctx context.Context) error {
		ran = true
		var p Payment
		var err error
		if mine.ID != "" {
			// 1. The request's own payment, begun by an earlier try, as it
			// stands now that no one else works on it (a reconciler may
			// have settled it).
			p, err = s.resume(ctx, mine, rec)
		} else {
			// 1. Begin: the processing payment, and the order paying.
			p, o, err = s.begin(ctx, userID, requestKey, o, method, rec)
		}
		if err != nil {
			return err
		}
		if p.Status != StatusProcessing {
			out = p
			return Outcome(p)
		}
		// 2. Charge, with no transaction open; 3. settle.
		out, err = s.charge(ctx, p, o, rec)
		return err
	})
	if !ran && problem.CodeOf(err) == problem.ResourceBusy {
		// The lock is held. By a copy of this very request (the key
		// claimed by it), the answer is the key's, as on every keyed
		// route: request_in_progress, or the copy's stored answer.
		if taken := rec.Taken(ctx); taken != nil {
			return Payment{}, taken
		}
	}
	return out, err
}

// begin opens the processing payment that the charge will settle, and
// moves its order to paying: one transaction, two round trips. known is
// the order as read before the lock. It returns the payment and the order
// as begun; or, when the order cannot begin a payment because this
// request already began one (a retry whose first try committed), that
// payment, as it stands, and the order as read.
func (s *Service) begin(ctx context.Context, userID, requestKey string, known orders.Order, method string, rec *idempotency.Record) (Payment, orders.Order, error) {
	var p Payment
	var begun orders.Order
	err := s.pay.Retry(ctx, func(attempt int) error {
		o := known
		if attempt > 1 {
			// The order moved since it was read: as it is now.
			var err error
			if o, err = s.orders.Get(ctx, known.ID); err != nil {
				return err
			}
		}
		now := s.stamp()
		// Round trip 1. Layer 0: BEGIN and the claim of the request's key
		// (the try-lock on the key and INSERT INTO idempotency_keys … ON
		// CONFLICT DO UPDATE): a copy of the request in flight is refused
		// here, 409 request_in_progress.
		first := &pgx.Batch{}
		rec.QueueClaim(first)
		// Layer 2: only the user's pending order, within its time, may
		// begin a payment, and it says so by moving to paying: a second
		// payment finds it paying, and the expiry job leaves it alone.
		// Layer 3: written at the version read (UPDATE orders … WHERE id
		// AND version); a cancel that moved it since matches no row, this
		// try rolls back, and the next reads it again.
		var err error
		begun, _, err = s.orders.QueueMove(ctx, first, o, orders.BeginPayment(userID, now))
		if err != nil {
			// Moved since the early look (another payment began): the
			// request's own payment, or the answer.
			begun = o
			mine, err := s.refused(ctx, err, requestKey, o, method)
			if err == nil {
				p, err = s.resume(ctx, mine, rec)
			}
			return err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new payment id: %w", err)
		}
		p = Payment{ID: id.String(), OrderID: o.ID, RequestKey: requestKey, Status: StatusProcessing,
			AmountCents: o.TotalCents, Method: method, Version: 1, CreatedAt: now, UpdatedAt: now}
		// Round trip 2. Layer 4: the payment's row (INSERT INTO payments),
		// one processing or succeeded per order
		// (payments_one_active_per_order: ErrActivePayment, answered 409
		// resource_busy), one per request (payments_order_request_key:
		// ErrDuplicateRequest, the request's own payment carried on); and
		// COMMIT.
		last := &pgx.Batch{}
		s.payments.QueueInsert(last, p)
		err = InsertError(orders.WriteError(postgres.InTxSend(ctx, s.db, first, last)))
		switch {
		case errors.Is(err, orders.ErrVersionConflict):
			return layers.Lost(layers.Version, err)
		case errors.Is(err, ErrActivePayment):
			// Whatever got past the lock and the state stops here.
			s.pay.Stopped(ctx, layers.Constraint)
			return s.inFlight(ctx, o.ID)
		case errors.Is(err, ErrDuplicateRequest):
			// An earlier try of this request began one, and it ended
			// without a charge (the order was payable again).
			begun = o
			mine, err := s.refused(ctx, err, requestKey, o, method)
			if err == nil {
				p, err = s.resume(ctx, mine, rec)
			}
			return err
		case err == nil:
			s.counts.attempts.Inc()
		}
		return err
	})
	if err != nil {
		return Payment{}, orders.Order{}, err
	}
	return p, begun, nil
}

// refused answers a click whose order refused to begin a payment (layer
// 2): the request's own payment, if this request began one (to be
// answered, or carried on); otherwise resource_busy while another payment
// is in flight, or the order's refusal. The same key with another method
// is idempotency_key_reused.
func (s *Service) refused(ctx context.Context, refusal error, requestKey string, o orders.Order, method string) (Payment, error) {
	if errors.Is(refusal, orders.ErrNotFound) {
		return Payment{}, ErrNotFound // someone else's order does not exist for this user
	}
	mine, active, err := s.store.OfRequestAndActive(ctx, o.ID, requestKey)
	switch {
	case err != nil:
		return Payment{}, err
	case mine.ID != "" && mine.Method != method:
		return Payment{}, errKeyReused
	case mine.ID != "":
		return mine, nil
	}
	s.pay.Stopped(ctx, layers.State)
	if errors.Is(refusal, orders.ErrPaymentInFlight) {
		return Payment{}, s.answerInFlight(o.ID, active)
	}
	return Payment{}, refusal
}

// errKeyReused answers a request whose key began a payment of the order
// with another method.
var errKeyReused = problem.New(problem.IdempotencyReused,
	"this Idempotency-Key was used for a payment with another method; send a new key for a new request")

// resume returns mine, the payment the request began in an earlier try,
// as it stands, after claiming the request's key again (layer 0) in a
// transaction that reads it: a payment that has succeeded completes the
// key with its answer there.
func (s *Service) resume(ctx context.Context, mine Payment, rec *idempotency.Record) (Payment, error) {
	var p Payment
	err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
		rec.QueueClaim(b)
		b.Queue(sqlGetPayment, mine.ID).QueryRow(func(row pgx.Row) error {
			var err error
			p, err = scanPayment(row)
			return err
		})
	}, func(pgx.Tx) (*pgx.Batch, error) {
		if p.Status != StatusSucceeded {
			return nil, nil
		}
		last := &pgx.Batch{}
		return last, rec.QueueComplete(last, paid(p))
	})
	p.RequestKey = mine.RequestKey
	return p, err
}

// inFlight is the answer to a payment of an order whose other payment is
// processing, or has just succeeded.
func (s *Service) inFlight(ctx context.Context, orderID string) error {
	_, active, err := s.store.OfRequestAndActive(ctx, orderID, "")
	if err != nil {
		return fmt.Errorf("read the payment in flight of %s: %w", orderID, err)
	}
	return s.answerInFlight(orderID, active)
}

// answerInFlight is inFlight's answer given the order's active payment,
// or none.
func (s *Service) answerInFlight(orderID string, active Payment) error {
	if active.Status == StatusSucceeded {
		return problem.New(problem.InvalidState, "order is paid and cannot be paid")
	}
	// None: the other payment failed or was refunded meanwhile; busy
	// tells the client to try again.
	return s.busy(orderID, active)
}

// busy is the answer to a payment while another of the order is in flight
// (active, or none if it settled meanwhile): when to look again, and where.
// While the other's request may still run, it settles within its budget;
// after that it waits for the reconciler, up to the reconcile delay.
func (s *Service) busy(orderID string, active Payment) error {
	now := s.now()
	wait := time.Second
	switch {
	case active.ID == "":
	case now.Before(active.CreatedAt.Add(s.budget)):
		wait = active.CreatedAt.Add(s.budget).Sub(now)
	default:
		wait = active.UpdatedAt.Add(s.reconcileAfter).Sub(now)
	}
	url := "/v1/orders/" + orderID + "/payments"
	return &problem.Error{Code: problem.ResourceBusy, RetryAfter: max(wait, time.Second),
		Detail: "a payment of this order is in flight; GET " + url + " shows how it ends",
		Extra:  map[string]any{"payments_url": url}}
}

// charge sends p to the gateway and records what it answered (settle).
// The call is made outside any transaction, with the payment id as its
// idempotency key: the request, its retries and the reconciler all send
// the same key, and the gateway charges it once. known is the order as
// begun, or as last read.
//
// Once the charge has been sent, every way out of here either records an
// outcome or leaves the payment processing with ErrOutcomeUnknown (202 to
// the client, and the reconciler finishes the work): a charge that may
// have been made is never answered with a failure.
func (s *Service) charge(ctx context.Context, p Payment, known orders.Order, rec *idempotency.Record) (Payment, error) {
	c, err := s.gateway.Charge(ctx, p.ID, ChargeRequest{AmountCents: p.AmountCents, PaymentMethod: p.Method, Reference: p.OrderID})
	var declined *DeclinedError
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		// Nothing was charged: the payment is discarded, and the order
		// can be paid again.
		out, err := s.settle(ctx, p, Payment{}, known, orders.PaymentEnded(s.stamp()), rec)
		if err != nil || out.ID != "" {
			return out, err
		}
		s.counts.outcome(outcomeRejected)
		return Payment{}, problem.Errorf(problem.Invalid, "payment_method: the gateway refused it: %s", refused.Detail)
	case errors.As(err, &declined):
		failed := p
		if err := failed.Fail(declined.Reason, s.stamp()); err != nil {
			return p, err
		}
		// The order can be paid again.
		return s.settle(ctx, p, failed, known, orders.PaymentEnded(s.stamp()), rec)
	case err != nil:
		s.counts.outcome(outcomeUnknown)
		s.logger.WarnContext(ctx, "payment outcome unknown; the reconciler will settle it", "payment", p.ID, "err", err)
		if !errors.Is(err, ErrOutcomeUnknown) {
			err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return p, fmt.Errorf("charge payment %s: %w", p.ID, err)
	}
	succeeded := p
	if err := succeeded.Succeed(c.ID, s.stamp()); err != nil {
		return p, err
	}
	out, err := s.settle(ctx, p, succeeded, known, orders.Pay(s.stamp()), rec)
	if problem.CodeOf(err) == problem.InvalidState {
		// The order was cancelled or expired while the charge was in
		// flight, and settle found the payment's own row still
		// processing: this payment did not pay the order. The customer
		// must not be charged for an order that stopped waiting.
		s.pay.Stopped(ctx, layers.State)
		return s.refund(ctx, p, c, rec)
	}
	return out, err
}

// settle records settled, the outcome of the processing payment p (the
// zero Payment discards p: the gateway refused it as invalid), and
// applies move to its order (nil: the order does not move), in one
// transaction of two round trips. The
// payment's own row decides first: when another settler recorded an
// outcome since p was read, that outcome is the answer, and the order is
// not touched. When the order refuses move (a paid order's Pay on an
// order cancelled meanwhile), settle asks the payment's row before it
// answers the refusal, so that its caller never refunds a charge another
// settler recorded. When the database does not answer within the budget,
// nothing is recorded: p stays processing for the reconciler.
func (s *Service) settle(ctx context.Context, p, settled Payment, known orders.Order, move orders.Change, rec *idempotency.Record) (Payment, error) {
	err := s.pay.Retry(ctx, func(attempt int) error {
		if attempt > 1 || known.ID == "" {
			// The order as it is now: it moved since it was known.
			var err error
			if known, err = s.orders.Get(ctx, p.OrderID); err != nil {
				return err
			}
		}
		// Round trip 1. Layer 0: BEGIN and the request's claim again: still
		// its own, or taken over after its lease ran out, and then this
		// stale settlement is refused before it writes anything.
		first := &pgx.Batch{}
		rec.QueueClaim(first)
		// Layer 3: the payment's own row first, at the version read
		// (UPDATE payments … WHERE id AND version; a discard, DELETE …
		// WHERE version); its row lock makes every other settler wait for
		// this one, and 0 rows (ErrVersionConflict) means another settler
		// recorded it: its outcome is the answer. Layer 4: the charge's id
		// settles one payment (payments_charge_id_key: ErrChargeSettled,
		// 500, nothing written).
		if settled.ID == "" {
			s.payments.QueueDiscard(first, p)
		} else {
			s.payments.QueueSettle(first, settled, p.Version)
		}
		// Layer 2: the order's rule (Pay, PaymentEnded); layer 3: at the
		// version known (UPDATE orders … WHERE id AND version): the order
		// moved since is read again, 3 tries, then the outcome is unknown
		// (202, processing, for the reconciler).
		if move != nil {
			if _, _, err := s.orders.QueueMove(ctx, first, known, move); err != nil {
				if cur, gerr := s.store.Get(ctx, p.ID); gerr == nil && cur.Status != StatusProcessing {
					settled = cur // another settler recorded it
					return nil
				}
				return err
			}
		}
		// Round trip 2: a success completes the key with its answer, and
		// COMMIT.
		last := &pgx.Batch{}
		if settled.Status == StatusSucceeded {
			if err := rec.QueueComplete(last, paid(settled)); err != nil {
				return err
			}
		}
		err := SettleError(orders.WriteError(postgres.InTxSend(ctx, s.db, first, last)))
		switch {
		case errors.Is(err, ErrVersionConflict):
			s.pay.Stopped(ctx, layers.Version)
			settled, err = s.recorded(ctx, p)
			return err
		case errors.Is(err, orders.ErrVersionConflict) && attempt < layers.MaxTries:
			return layers.Lost(layers.Version, err)
		case errors.Is(err, orders.ErrVersionConflict):
			// The order changed under every try: the charge may have gone
			// through, so the answer is not busy but unknown, for the
			// reconciler.
			s.pay.Stopped(ctx, layers.Version)
			return fmt.Errorf("record payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
		case errors.Is(err, ErrChargeSettled):
			return fmt.Errorf("settle payment %s with charge %s: %w", p.ID, settled.ChargeID, err)
		case err != nil && problem.CodeOf(err) == "":
			return fmt.Errorf("record payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
		}
		return err
	})
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		s.counts.outcome(outcomeUnknown)
		s.logger.WarnContext(ctx, "payment outcome not recorded; the reconciler will record it", "payment", p.ID, "err", err)
		return p, err
	case err != nil:
		return p, err
	case settled.ID == "":
		return Payment{}, nil // discarded
	}
	s.counts.outcome(string(settled.Status))
	return settled, Outcome(settled)
}

// refund gives back the charge of a payment whose order stopped waiting.
// The refund is keyed by the payment, so it too happens once. If the
// gateway does not answer, the payment stays processing and the
// reconciler comes back to it.
func (s *Service) refund(ctx context.Context, p Payment, c Charge, rec *idempotency.Record) (Payment, error) {
	r, err := s.gateway.Refund(ctx, "refund-"+p.ID, c.ID, 0)
	if err != nil {
		s.counts.outcome(outcomeUnknown)
		s.logger.WarnContext(ctx, "refund outcome unknown; the reconciler will retry it", "payment", p.ID, "charge", c.ID, "err", err)
		return p, fmt.Errorf("refund payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
	}
	s.counts.refunds.Inc()
	refunded := p
	if err := refunded.Refund(c.ID, r.ID, s.stamp()); err != nil {
		return p, err
	}
	// The order has stopped waiting: it does not move, and is not read.
	return s.settle(ctx, p, refunded, orders.Order{ID: p.OrderID}, nil, rec)
}

// recorded returns the payment as another settler recorded it.
func (s *Service) recorded(ctx context.Context, p Payment) (Payment, error) {
	exists, err := s.store.Exists(ctx, p.ID)
	if err == nil && !exists {
		return Payment{}, nil // discarded by another settler
	}
	cur, err := s.store.Get(ctx, p.ID)
	if err != nil {
		return p, fmt.Errorf("read payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
	}
	return cur, nil
}

// Outcome is the error that goes with a payment's status: nil for
// succeeded, and for the others what the client is told.
func Outcome(p Payment) error {
	switch p.Status {
	case StatusSucceeded:
		return nil
	case StatusFailed:
		return problem.Errorf(problem.PaymentDeclined, "the payment was declined: %s", p.FailureReason)
	case StatusRefunded:
		return problem.New(problem.InvalidState, "the order stopped waiting for payment while it was being charged; the charge was refunded")
	default:
		return fmt.Errorf("payment %s: %w", p.ID, ErrOutcomeUnknown)
	}
}

// Payments returns the payments of one of userID's orders, oldest first.
func (s *Service) Payments(ctx context.Context, userID, orderID string) ([]Payment, error) {
	if !ids.Valid(orderID) {
		return nil, ErrNotFound
	}
	o, err := s.orders.Get(ctx, orderID)
	if err != nil || o.UserID != userID {
		return nil, ErrNotFound
	}
	return s.store.OfOrder(ctx, orderID)
}

func (s *Service) stamp() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}
