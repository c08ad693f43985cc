//go:build faults

package faults

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/testenv"
)

// Row 12: a transaction that has written a row stays open in another
// database of the same PostgreSQL server while the pay storm runs, as a
// long migration, a backup's bookkeeping or a batch job next door would.
// The relay must go on publishing: a transaction in another database
// cannot write to the shop's outbox (DESIGN.md §9). The replicas run with
// the redelivery's production pause (SHOP_OUTBOX_REDELIVER_AFTER=30s),
// so that what delivers the receipts is the relay and not the
// redelivery; the row's floor is on the receipts' lag.

// receiptsWithin is row 12's floor: every order paid while the
// transaction is open has its receipt at the mailer within it of the
// payment's commit. The relay polls every 100 ms and the consumer mails
// at once; a relay held back by the transaction would make it as long as
// the transaction.
const receiptsWithin = 5 * time.Second

// longTransaction is row 12.
func longTransaction() scenario {
	var relayLag maxSampler
	longTxFor := sizeFromEnv().longTx
	return scenario{row: "12", flows: []string{flowPay}, during: longTxFor,
		env:            []string{"SHOP_OUTBOX_REDELIVER_AFTER=30s"},
		receiptsWithin: receiptsWithin,
		floors:         half("a transaction in another database takes no lock and no row the shop needs"),
		fault: func(t *testing.T, c *cluster) func() {
			ctx := context.Background()
			other, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
			if err != nil {
				t.Fatalf("connect to another database: %v", err)
			}
			tx, err := other.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE batch_job (n int); INSERT INTO batch_job VALUES (1)`); err != nil {
				t.Fatalf("write in another database: %v", err)
			}
			stop := relayLag.sample(c)
			return func() {
				stop()
				if err := tx.Rollback(ctx); err != nil {
					t.Errorf("end the long transaction: %v", err)
				}
				_ = other.Close(ctx)
			}
		},
		observe: func(*cluster) map[string]float64 { return map[string]float64{"lag": relayLag.max()} },
		report: func(_ *testing.T, _ *cluster, healed, _ map[string]float64) string {
			return fmt.Sprintf("the relay's lag (shop_outbox_lag_seconds, the worst replica) at most %.1f s while a transaction was open %s in another database",
				healed["lag"], longTxFor)
		},
	}
}

// maxSampler keeps the largest shop_outbox_lag_seconds any replica
// reported while it sampled.
type maxSampler struct {
	mu  sync.Mutex
	top float64
}

// sample reads every replica's lag twice a second until stop is called.
func (m *maxSampler) sample(c *cluster) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c.replicasMu.Lock()
			replicas := slices.Clone(c.replicas)
			c.replicasMu.Unlock()
			for _, r := range replicas {
				scrape(r, func(name, _ string, value float64) {
					if name == "shop_outbox_lag_seconds" {
						m.mu.Lock()
						m.top = max(m.top, value)
						m.mu.Unlock()
					}
				})
			}
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (m *maxSampler) max() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.top
}

// receiptLags returns, for each order whose order.paid was committed
// between from and to, how long its receipt took to reach the mailer
// after the commit; -1 for an order without one.
func receiptLags(c *cluster, from, to time.Time) ([]time.Duration, error) {
	ctx := context.Background()
	rows, err := c.db.Query(ctx, `SELECT payload->'metadata'->>'subject', payload->'metadata'->>'at'
		FROM watermill_outbox WHERE payload->>'destination_topic' = 'order.paid'`)
	if err != nil {
		return nil, fmt.Errorf("paid events: %w", err)
	}
	paidAt := map[string]time.Time{}
	for rows.Next() {
		var subject, at string
		if err := rows.Scan(&subject, &at); err != nil {
			rows.Close()
			return nil, err
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("event of %s: at %q: %w", subject, at, err)
		}
		if !t.Before(from) && t.Before(to) {
			paidAt[subject] = t
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	msgs, err := mailerMessages(c)
	if err != nil {
		return nil, err
	}
	sent := map[string]time.Time{}
	for _, m := range msgs {
		if m.Kind == "receipt" {
			sent[m.Reference] = m.CreatedAt
		}
	}
	var lags []time.Duration
	for order, at := range paidAt {
		s, ok := sent[order]
		if !ok {
			lags = append(lags, -1)
			continue
		}
		lags = append(lags, s.Sub(at))
	}
	return lags, nil
}

// judgeReceipts is row 12's floor: the receipts of the orders paid
// during the fault, each within bound of its payment, and at least one.
func judgeReceipts(c *cluster, p phases, bound time.Duration) (verdict string, ok bool) {
	lags, err := receiptLags(c, p.faultAt, p.healAt)
	if err != nil {
		return fmt.Sprintf("receipts' lag: %v", err), false
	}
	slices.Sort(lags)
	missing := 0
	for _, l := range lags {
		if l < 0 {
			missing++
		}
	}
	sent := lags[missing:]
	if len(sent) == 0 {
		return fmt.Sprintf("receipts ≤ %s after the payment: %d orders paid during the fault, none with a receipt", bound, len(lags)), false
	}
	worst, median := sent[len(sent)-1], sent[len(sent)/2]
	verdict = fmt.Sprintf("receipts ≤ %s after the payment: %d orders paid during the fault, median %s, worst %s, %d without a receipt",
		bound, len(lags), median.Round(time.Millisecond), worst.Round(time.Millisecond), missing)
	return verdict, missing == 0 && worst <= bound
}
