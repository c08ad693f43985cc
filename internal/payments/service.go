package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the pay flow, where each one is:
//
//	layer           where                                       backed by
//	0 idempotency   the key's record, claimed in the begin's    idempotency_keys (Store.Begin,
//	                transaction, completed in the settle's;     Settle, Resume), payments_order_
//	                (order, key) on the payment's row           request_key
//	1 lock          payment:{order}, held across the gateway    Pay, reconcileOne; LockTries
//	                call under the watchdog; a click that
//	                finds it held is refused, not queued
//	2 state         the order: pending_payment → paying → paid  orders.Order.BeginPayment, Pay,
//	                (begin), the payment: processing → settled; PaymentEnded; Payment.settle;
//	                asked of the order as read before the lock  admit
//	3 version       the payment's row written first, at its     Store.Settle: sqlSettlePayment,
//	                version, then the order's at its version    orders.UpdateTx
//	4 constraint    one processing-or-succeeded payment per     payments_one_active_per_order,
//	                order; a charge settles one payment         payments_charge_id_key
//	+ gateway key   the payment id is the gateway's             gateway.Charge, Refund
//	                Idempotency-Key: one charge per payment
//
// What one payment costs, the winner of its order (auth's round trip
// aside):
//
//	read the order                      1 round trip     orders.Service.Get (admit)
//	lock payment:{order}                Redis: SET NX on each node, and the release
//	begin: claim, order at the version  2, one commit    Store.Begin
//	read, payment
//	charge                              the gateway, no transaction open
//	settle: claim, payment, order at    2, one commit    Store.Settle
//	the version begun, answer
//
// An order that moved since it was read costs a read in the transaction
// (two round trips more), and its move is decided on the order as it is.
// A loser costs the order's read and, when the order cannot begin a
// payment, the read of the payments (one statement), or one lock
// attempt; and, for an answer that is stored (invalid_state), one
// statement of the Atomic middleware's, after the request's rollback.

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

// Config holds what the service is built from.
type Config struct {
	Store   *Store
	Orders  *orders.Service
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
	// Layers are the defences on. The zero value is all of them; only the
	// layer tests take some off.
	Layers layers.Set
}

// Service runs the pay flow and the reconciler.
type Service struct {
	store          *Store
	orders         *orders.Service
	gateway        *Gateway
	pay, reconcile layers.Flow
	metrics        *metrics.Metrics
	counts         *counters
	logger         *slog.Logger
	now            func() time.Time
	budget         time.Duration
	reconcileAfter time.Duration
	layers         layers.Set
}

// NewService returns the payment service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Orders == nil || cfg.Gateway == nil || cfg.Locker == nil {
		return nil, errors.New("payments: a store, the order service, a gateway and a locker are required")
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
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	flow := layers.Flows("order", cfg.Layers, cfg.Locker, cfg.Metrics)
	return &Service{store: cfg.Store, orders: cfg.Orders, gateway: cfg.Gateway,
		pay: flow(FlowPay), reconcile: flow(jobReconcile),
		metrics: cfg.Metrics, counts: counts, logger: cfg.Logger, now: cfg.Now,
		budget: cfg.Budget, reconcileAfter: cfg.ReconcileAfter, layers: cfg.Layers}, nil
}

// Pay charges one of userID's orders with method and, once the charge has
// gone through, marks the order paid. requestKey is the client's
// Idempotency-Key: a request sent again after a first try whose begin
// committed (its answer lost) carries that try's payment on, and gets its
// outcome. It returns the payment with:
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

	// Read first: a click on an order that is being paid, or is paid, is
	// answered from the database at once; only a payable order, or this
	// request's own payment still to be carried on, goes for the lock.
	o, mine, err := s.admit(ctx, userID, requestKey, orderID, method)
	switch {
	case err != nil:
		return Payment{}, err
	case mine.ID != "" && mine.Status != StatusProcessing:
		// The request's own payment has settled: its outcome, given
		// under the request's key (replayed, when the key stored it).
		p, err := s.resume(ctx, mine.ID, rec)
		if err != nil {
			return Payment{}, err
		}
		return p, Outcome(p)
	}

	var out Payment
	// Layer 1: one payment of this order at a time, across replicas. The
	// lock is held across the gateway call; its watchdog extends the lease
	// while the call runs, and cancels the call if the lease is lost. It
	// serialises the winner's work, it is not the losers' queue: a click
	// that finds it held is told resource_busy at once (LockTries), not
	// after the winner's charge.
	err = s.pay.Lock(ctx, "payment:"+orderID, func(ctx context.Context) error {
		var p Payment
		var begun orders.Order // the order as this request's begin left it
		var err error
		if mine.ID != "" {
			// The request's own payment first, as it stands now that no
			// one else works on it: a reconciler may have settled it.
			p, err = s.resume(ctx, mine.ID, rec)
		} else {
			p, begun, err = s.begin(ctx, userID, requestKey, o, method, rec)
		}
		if errors.Is(err, ErrDuplicateRequest) {
			// An earlier try of this request began one (and it ended
			// without a charge: the order was payable again).
			if p, err = s.ofRequest(ctx, userID, requestKey, orderID, method); err == nil {
				p, err = s.resume(ctx, p.ID, rec)
			}
		}
		switch {
		case err != nil:
			return err
		case p.Status != StatusProcessing:
			out = p
			return Outcome(p)
		}
		out, err = s.charge(ctx, p, begun, rec)
		return err
	})
	return out, err
}

// admit reads the order (someone else's does not exist for this user)
// and decides whether this request goes for the lock: the order may begin
// a payment (layer 2's rule, asked of the order as read), or the request
// has a payment of its own, returned to be carried on or answered.
// Otherwise it returns the answer, without the lock: resource_busy while
// another payment of the order is in flight, or invalid_state. The
// payments are read only when the order cannot begin one, in one
// statement: the request's own decides first, then the order's active
// one.
//
// The read is advice: the lock, the version-checked begin and the
// constraints decide, whatever changed since.
func (s *Service) admit(ctx context.Context, userID, requestKey, orderID, method string) (orders.Order, Payment, error) {
	o, err := s.orders.Get(ctx, userID, orderID)
	if err != nil {
		return orders.Order{}, Payment{}, err
	}
	check := o
	refused := s.beginPayment(&check, s.stamp())
	if refused == nil {
		return o, Payment{}, nil
	}
	mine, active, err := s.store.OfRequestAndActive(ctx, orderID, requestKey)
	switch {
	case err != nil:
		return orders.Order{}, Payment{}, err
	case mine.ID != "" && mine.Method != method:
		return orders.Order{}, Payment{}, errKeyReused
	case mine.ID != "":
		return o, mine, nil
	}
	s.pay.Stopped(ctx, layers.State)
	if errors.Is(refused, orders.ErrPaymentInFlight) {
		return orders.Order{}, Payment{}, s.answerInFlight(orderID, active)
	}
	return orders.Order{}, Payment{}, refused
}

// resume reads the request's own payment id again, claiming the request's
// key with it (layer 0); a payment that has succeeded completes the key
// with its answer in the same transaction.
func (s *Service) resume(ctx context.Context, id string, rec *idempotency.Record) (Payment, error) {
	return s.store.Resume(ctx, id, rec, func(p Payment) (idempotency.Answer, bool) {
		return paid(p), p.Status == StatusSucceeded
	})
}

// errKeyReused answers a request whose key began a payment of the order
// with another method.
var errKeyReused = problem.New(problem.IdempotencyReused,
	"this Idempotency-Key was used for a payment with another method; send a new key for a new request")

// ofRequest returns the payment of userID's order begun with requestKey,
// or ErrNotFound. The same key with another payment method is
// idempotency_key_reused.
func (s *Service) ofRequest(ctx context.Context, userID, requestKey, orderID, method string) (Payment, error) {
	p, err := s.store.OfRequest(ctx, orderID, requestKey)
	if err != nil {
		return Payment{}, err
	}
	if _, err := s.orders.Get(ctx, userID, orderID); err != nil {
		return Payment{}, err // someone else's order does not exist for this user
	}
	if p.Method != method {
		return Payment{}, errKeyReused
	}
	return p, nil
}

// begin opens the processing payment that the charge will settle, and
// moves its order (o, as read before the lock) to paying, in one
// transaction that claims the request's key (rec). It returns the payment
// and the order as written.
func (s *Service) begin(ctx context.Context, userID, requestKey string, o orders.Order, method string, rec *idempotency.Record) (Payment, orders.Order, error) {
	var p Payment
	var begun orders.Order
	err := s.pay.Retry(ctx, func(attempt int) error {
		read := o
		if attempt > 1 {
			// Layer 3: the order moved between read and write (a cancel):
			// it is read again, in the transaction, and decided on as it is.
			read = orders.Order{}
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new payment id: %w", err)
		}
		now := s.stamp()
		p = Payment{ID: id.String(), OrderID: o.ID, RequestKey: requestKey, Status: StatusProcessing, AmountCents: o.TotalCents,
			Method: method, Version: 1, CreatedAt: now, UpdatedAt: now}
		p, begun, err = s.store.Begin(ctx, p, s.layers, rec, read, func(o *orders.Order) error {
			if o.UserID != userID {
				return ErrNotFound // someone else's order does not exist for this user
			}
			// Layer 2: the order's state machine: only a pending order
			// within its time begins a payment, and it says so by moving
			// to paying (a second payment finds it paying).
			if err := s.beginPayment(o, now); err != nil {
				s.pay.Stopped(ctx, layers.State)
				return err
			}
			return nil
		})
		switch {
		case errors.Is(err, orders.ErrVersionConflict):
			return layers.Lost(layers.Version, err)
		case errors.Is(err, ErrActivePayment):
			// Layer 4: the partial unique index admits one processing-or-
			// succeeded payment per order; whatever got past the lock and
			// the state stops here.
			s.pay.Stopped(ctx, layers.Constraint)
			return s.inFlight(ctx, o.ID)
		case errors.Is(err, orders.ErrPaymentInFlight):
			return s.inFlight(ctx, o.ID)
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

// beginPayment applies the order's rule for a payment beginning (layer 2),
// or, with the layer off, only marks it as being paid.
func (s *Service) beginPayment(o *orders.Order, now time.Time) error {
	if s.layers.On(layers.State) {
		return o.BeginPayment(now)
	}
	o.Status, o.UpdatedAt = orders.StatusPaying, now
	return nil
}

// inFlight is the answer to a payment of an order whose other payment is
// processing, or has just succeeded.
func (s *Service) inFlight(ctx context.Context, orderID string) error {
	active, err := s.store.Active(ctx, orderID)
	if err != nil && !errors.Is(err, ErrNotFound) {
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

// charge sends p to the gateway and records what it answered. The call is
// made outside any transaction, with the payment id as its idempotency
// key: the request, its retries and the reconciler all send the same key,
// and the gateway charges it once.
//
// Once the charge has been sent, every way out of here either records an
// outcome or leaves the payment processing with ErrOutcomeUnknown (202 to
// the client, and the reconciler finishes the work): a charge that may
// have been made is never answered with a failure.
func (s *Service) charge(ctx context.Context, p Payment, begun orders.Order, rec *idempotency.Record) (Payment, error) {
	c, err := s.gateway.Charge(ctx, p.ID, ChargeRequest{AmountCents: p.AmountCents, PaymentMethod: p.Method, Reference: p.OrderID})
	var declined *DeclinedError
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		return s.discard(ctx, p, refused, rec)
	case errors.As(err, &declined):
		failed := p
		now := s.stamp()
		if err := failed.Fail(declined.Reason, now); err != nil {
			return p, err
		}
		// The order can be paid again.
		return s.record(ctx, p, failed, rec, begun, outcomeFailed, s.paymentEnded(now))
	case err != nil:
		s.counts.outcome(outcomeUnknown)
		s.logger.WarnContext(ctx, "payment outcome unknown; the reconciler will settle it", "payment", p.ID, "err", err)
		if !errors.Is(err, ErrOutcomeUnknown) {
			err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return p, fmt.Errorf("charge payment %s: %w", p.ID, err)
	}

	// Layer 3: one transaction records the charge and moves the order
	// paying → paid, each row written only at the version read.
	var out Payment
	err = s.pay.Retry(ctx, func(attempt int) error {
		if attempt > 1 {
			begun = orders.Order{} // the order moved: read it in the transaction
		}
		paid := p
		now := s.stamp()
		if err := paid.Succeed(c.ID, now); err != nil {
			out = p
			return err
		}
		var err error
		out, err = s.record(ctx, p, paid, rec, begun, outcomeSucceeded, func(o *orders.Order) (bool, error) {
			// Layer 2: the order must still be waiting for this payment.
			if !s.layers.On(layers.State) {
				o.Status, o.UpdatedAt = orders.StatusPaid, now
				return true, nil
			}
			return true, o.Pay(now)
		})
		switch {
		case errors.Is(err, orders.ErrVersionConflict) && attempt < layers.MaxTries:
			return layers.Lost(layers.Version, err)
		case errors.Is(err, orders.ErrVersionConflict):
			// Changed under every try: the charge went through, so the
			// answer is not busy but unknown, for the reconciler.
			s.pay.Stopped(ctx, layers.Version)
			s.counts.outcome(outcomeUnknown)
			return fmt.Errorf("record payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
		case problem.CodeOf(err) == problem.InvalidState:
			// The order was cancelled or expired while the charge was in
			// flight. Settle asked the payment's own row first: it is still
			// processing, so this payment did not pay the order, and a
			// settler that lost to another gets that one's outcome instead
			// and never comes here. The customer must not be charged for
			// an order that stopped waiting.
			s.pay.Stopped(ctx, layers.State)
			out, err = s.refund(ctx, p, c, rec)
		}
		return err
	})
	return out, err
}

// paymentEnded is the order's move when its payment ended without a
// charge: back to pending, so it can be paid again (layer 2 leaves an
// order that moved on meanwhile, a cancelled one, as it is).
func (s *Service) paymentEnded(now time.Time) func(*orders.Order) (bool, error) {
	return func(o *orders.Order) (bool, error) {
		if !s.layers.On(layers.State) {
			o.Status, o.UpdatedAt = orders.StatusPendingPayment, now
			return true, nil
		}
		return o.PaymentEnded(now), nil
	}
}

// discard removes a payment whose request the gateway refused as invalid:
// nothing was charged, so nothing is kept, and the client is told what
// was wrong with its request.
func (s *Service) discard(ctx context.Context, p Payment, refused *RefusedError, rec *idempotency.Record) (Payment, error) {
	err := s.store.Discard(ctx, p, s.layers, rec, s.paymentEnded(s.stamp()))
	if errors.Is(err, ErrVersionConflict) {
		return s.recorded(ctx, p)
	}
	if err != nil {
		s.counts.outcome(outcomeUnknown)
		return p, fmt.Errorf("discard payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
	}
	s.counts.outcome(outcomeRejected)
	return Payment{}, problem.Errorf(problem.Invalid, "payment_method: the gateway refused it: %s", refused.Detail)
}

// refund gives back the charge of a payment whose order stopped waiting.
// The refund is keyed by the payment, so it too happens once. If the
// gateway does not answer, the payment stays processing and the
// reconciler comes back to it.
func (s *Service) refund(ctx context.Context, p Payment, c Charge, rec *idempotency.Record) (Payment, error) {
	r, err := s.gateway.Refund(ctx, "refund-"+p.ID, c.ID)
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
	return s.record(ctx, p, refunded, rec, orders.Order{}, outcomeRefunded, nil)
}

// record writes settled, the outcome of the processing payment p (and
// moves its order, if moveOrder is set), claiming the request's key (rec)
// again first; a success completes the key with its answer in the same
// transaction, and the other outcomes, problems, are stored by the key's
// middleware. When
// another settler got there first, the version check stops this one, and
// the payment as that one left it is the answer. When the database does
// not answer (within the budget), nothing is recorded: p stays processing
// for the reconciler.
func (s *Service) record(ctx context.Context, p, settled Payment, rec *idempotency.Record, begun orders.Order, outcome string,
	moveOrder func(*orders.Order) (bool, error)) (Payment, error) {
	var answer func(Payment) idempotency.Answer
	if settled.Status == StatusSucceeded {
		answer = paid
	}
	out, err := s.store.Settle(ctx, settled, s.layers, rec, begun, moveOrder, answer)
	switch {
	case errors.Is(err, ErrVersionConflict):
		s.pay.Stopped(ctx, layers.Version)
		return s.recorded(ctx, p)
	case errors.Is(err, orders.ErrVersionConflict), problem.CodeOf(err) != "":
		return p, err // the order's answer: the caller decides on it
	case err != nil:
		s.counts.outcome(outcomeUnknown)
		s.logger.WarnContext(ctx, "payment outcome not recorded; the reconciler will record it", "payment", p.ID, "err", err)
		return p, fmt.Errorf("record payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
	}
	s.counts.outcome(outcome)
	return out, Outcome(out)
}

// recorded returns the payment as another settler recorded it, with the
// answer that goes with it.
func (s *Service) recorded(ctx context.Context, p Payment) (Payment, error) {
	cur, err := s.store.Get(ctx, p.ID)
	if err != nil {
		return p, fmt.Errorf("read payment %s: %w: %w", p.ID, ErrOutcomeUnknown, err)
	}
	return cur, Outcome(cur)
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
	if _, err := s.orders.Get(ctx, userID, orderID); err != nil {
		return nil, err
	}
	return s.store.OfOrder(ctx, orderID)
}

func (s *Service) stamp() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}
