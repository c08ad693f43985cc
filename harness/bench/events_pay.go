package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// payer pays pending orders as the pay flow's settle does
// (payments.Service.settle): the order read first, its move to paid
// applied by the domain's rules, then one transaction of two round trips,
//
//	BEGIN + the succeeded payment +   the order's write at the version
//	the order's versioned write +     read, and its event
//	order.paid                        (orders.Store.QueueMove)
//	COMMIT
//
// so each event is the outbox row the flow writes, committed with the
// change it announces. What comes before that transaction in the flow
// (the HTTP request, the lock, the begin, the gateway's charge) is not
// run: the bench measures what follows the commit.
type payer struct {
	pool   *pgxpool.Pool
	orders *orders.Store
}

func newPayer(pool *pgxpool.Pool) payer { return payer{pool: pool, orders: orders.NewStore(pool)} }

// errMovedMeanwhile: the order's versioned write matched no row.
var errMovedMeanwhile = errors.New("order moved since it was read")

// pay pays order id, or says why not.
func (p payer) pay(ctx context.Context, id string) error {
	o, err := p.orders.Get(ctx, id)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	paymentID, err := uuid.NewV7()
	if err != nil {
		return err
	}
	// The order begins its payment and is paid, in one move written at
	// the version read, with its order.paid.
	paid := func(o *orders.Order) (bool, error) {
		if _, err := orders.BeginPayment(o.UserID, now)(o); err != nil {
			return false, err
		}
		return orders.Pay(now)(o)
	}
	first := &pgx.Batch{}
	first.Queue(sqlRawInsertPayment, paymentID, id, o.TotalCents, gw.MethodOK, "ch_"+paymentID.String(), now)
	if _, _, err := p.orders.QueueMove(ctx, first, o, paid); err != nil {
		return err
	}
	err = orders.WriteError(postgres.InTxSend(ctx, p.pool, first, &pgx.Batch{}))
	if errors.Is(err, orders.ErrVersionConflict) {
		return errMovedMeanwhile
	}
	return err
}

// failure names err for the report.
func failure(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, errMovedMeanwhile):
		return "moved meanwhile"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}

// payAll pays every order of ids, clients at once, as fast as they go. It
// returns the orders paid and the failures by kind.
func (p payer) payAll(ctx context.Context, ids []string, clients int) (paid []string, failures map[string]int) {
	done := p.run(ctx, ids, clients, func(int) time.Time { return time.Time{} })
	return done.paid()
}

// paced pays the orders of ids at rate per second from start, clients at
// once: order i is paid at start + i/rate, or as soon as a client is free
// after that. The schedule does not wait for the payments, as customers
// do not.
func (p payer) paced(ctx context.Context, ids []string, rate, clients int, start time.Time) payRun {
	return p.run(ctx, ids, clients, func(i int) time.Time {
		return start.Add(time.Duration(i) * time.Second / time.Duration(rate))
	})
}

// payment is one order's payment: when it was due, began and ended, and
// what went wrong, if anything.
type payment struct {
	order             string
	due, begin, ended time.Time
	failure           string
}

// payRun is the payments of a run, one per order, in the orders' order.
type payRun []payment

// run pays each order of ids at its due time, clients at once.
func (p payer) run(ctx context.Context, ids []string, clients int, due func(i int) time.Time) payRun {
	out := make(payRun, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				at := due(i)
				if !at.IsZero() && !sleepUntil(ctx, at) {
					return
				}
				pm := payment{order: ids[i], due: at, begin: time.Now()}
				if err := p.pay(ctx, ids[i]); err != nil {
					pm.failure = failure(ctx, err)
				}
				pm.ended = time.Now()
				out[i] = pm
			}
		})
	}
	wg.Wait()
	return out
}

// paid returns the orders paid, and the failures by kind (an order never
// begun counts as "not begun").
func (ps payRun) paid() (ids []string, failures map[string]int) {
	failures = map[string]int{}
	for _, pm := range ps {
		switch {
		case pm.begin.IsZero():
			failures["not begun"]++
		case pm.failure != "":
			failures[pm.failure]++
		default:
			ids = append(ids, pm.order)
		}
	}
	return ids, failures
}

// writerStats are the paced payers' figures over the window.
type writerStats struct {
	inWindow int           // payments that ended in the window
	p50, p99 time.Duration // of their transactions, the read included
	late     int           // payments due by the window's end not begun by then
}

func (ps payRun) stats(from, to time.Time) writerStats {
	var s writerStats
	var took []time.Duration
	for _, pm := range ps {
		if pm.failure == "" && !pm.ended.IsZero() && !pm.ended.Before(from) && pm.ended.Before(to) {
			took = append(took, pm.ended.Sub(pm.begin))
		}
		if !pm.due.After(to) && (pm.begin.IsZero() || pm.begin.After(to)) {
			s.late++
		}
	}
	slices.Sort(took)
	s.inWindow, s.p50, s.p99 = len(took), percentile(took, 0.50), percentile(took, 0.99)
	return s
}
