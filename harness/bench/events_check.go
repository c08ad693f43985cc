package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/internal/notify"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// eventConsumers are the consumers of order.paid, as their inbox rows name
// them: the fulfilment and the mail.
var eventConsumers = []string{orders.ConsumerFulfilment, notify.Consumer}

// eventTally is what a phase's paid orders left behind, as the checks
// count it.
type eventTally struct {
	orders      int            // orders the phase paid
	payFailures map[string]int // payments that failed, by kind
	rows        int            // their order.paid rows in the outbox
	published   int            // of their events, those found in the phase's stream
	copies      int            // entries of their events in the stream
	fulfilled   int            // their orders now fulfilled
	fulfilments int            // their fulfilment rows
	inbox       map[string]int // their events recorded, by consumer
	processed   map[string]int // deliveries acted on, by consumer (the replicas' metrics)
	receipts    int            // receipts about them at the mailer
	missing     int            // orders with no receipt
	extra       int            // receipts beyond an order's first
	failed      int            // deliveries given up on for good
}

// violations are the checks the tally fails: every paid order announced
// once, published, fulfilled once, recorded once by each consumer and
// mailed one receipt, and no delivery given up on.
func (t eventTally) violations() []string {
	var bad []string
	want := func(what string, got int) {
		if got != t.orders {
			bad = append(bad, fmt.Sprintf("%d %s for %d paid orders", got, what, t.orders))
		}
	}
	if t.orders == 0 {
		bad = append(bad, "no order was paid")
	}
	if len(t.payFailures) > 0 {
		bad = append(bad, "payments failed: "+countSummary(t.payFailures))
	}
	want("order.paid rows in the outbox", t.rows)
	want("events in the stream", t.published)
	want("orders fulfilled", t.fulfilled)
	want("fulfilment rows", t.fulfilments)
	for _, c := range eventConsumers {
		want("events in the inbox of "+c, t.inbox[c])
		want("deliveries processed by "+c, t.processed[c])
	}
	want("receipts", t.receipts)
	if t.missing > 0 || t.extra > 0 {
		bad = append(bad, fmt.Sprintf("%d orders without a receipt, %d receipts beyond an order's first", t.missing, t.extra))
	}
	if t.failed > 0 {
		bad = append(bad, fmt.Sprintf("%d deliveries failed for good", t.failed))
	}
	return bad
}

// String is the checks' line: the counts, then whether they hold.
func (t eventTally) String() string {
	verdict := "holds"
	if bad := t.violations(); len(bad) > 0 {
		verdict = "BROKEN: " + strings.Join(bad, "; ")
	}
	return fmt.Sprintf("%d orders paid, %d order.paid rows, %d in the stream (%d entries), %d fulfilled (%d fulfilment rows), inbox %s %d and %s %d, processed %d and %d, %d receipts (%d orders without, %d beyond the first), %d failed for good: %s",
		t.orders, t.rows, t.published, t.copies, t.fulfilled, t.fulfilments,
		eventConsumers[0], t.inbox[eventConsumers[0]], eventConsumers[1], t.inbox[eventConsumers[1]],
		t.processed[eventConsumers[0]], t.processed[eventConsumers[1]], t.receipts, t.missing, t.extra, t.failed, verdict)
}

// The phase's rows: its orders' events in the outbox (the row's
// created_at, a timestamp in the session's zone, as an instant), their
// inbox rows, their fulfilments.
const (
	sqlPhaseOutbox = `SELECT payload->>'uuid', created_at AT TIME ZONE current_setting('TimeZone')
		FROM watermill_outbox WHERE payload->>'uuid' = ANY($1::text[])`
	sqlPhaseInbox   = `SELECT consumer, event_id::text, processed_at FROM inbox WHERE event_id = ANY($1::uuid[])`
	sqlPhaseShipped = `SELECT (SELECT count(*) FROM orders WHERE id = ANY($1::uuid[]) AND status = 'fulfilled'),
		(SELECT count(*) FROM fulfilments WHERE order_id = ANY($1::uuid[]))`
)

// collect reads the moments of the phase's events, from the outbox, the
// phase's stream and the inbox, and tallies what its orders left behind.
func (env *eventsEnv) collect(ctx context.Context, ph *eventPhase) error {
	t := &ph.tally
	t.orders, t.inbox, t.processed, t.failed = len(ph.orders), map[string]int{}, map[string]int{}, ph.counts.failed()
	for _, c := range eventConsumers {
		t.processed[c] = ph.counts.processed(c)
	}
	ids := make([]string, len(ph.orders))
	at := make(map[string]int, len(ph.orders)) // event id → index
	for i, order := range ph.orders {
		ids[i] = outbox.EventID(outbox.OrderPaid, order)
		at[ids[i]] = i
	}
	ph.events = make([]eventTimes, len(ids))

	rows, err := env.pool.Query(ctx, sqlPhaseOutbox, ids)
	if err != nil {
		return fmt.Errorf("read the outbox: %w", err)
	}
	for rows.Next() {
		var id string
		var created time.Time
		if err := rows.Scan(&id, &created); err != nil {
			rows.Close()
			return fmt.Errorf("read the outbox: %w", err)
		}
		ph.events[at[id]].committed = created
		t.rows++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the outbox: %w", err)
	}

	err = readStream(ctx, env.rdb, ph.prefix+outbox.OrderPaid, func(id string, published time.Time) {
		i, ok := at[id]
		if !ok {
			return
		}
		t.copies++
		if e := &ph.events[i]; e.at[stepPublished].IsZero() {
			e.at[stepPublished] = published
			t.published++
		}
	})
	if err != nil {
		return err
	}

	rows, err = env.pool.Query(ctx, sqlPhaseInbox, ids)
	if err != nil {
		return fmt.Errorf("read the inbox: %w", err)
	}
	for rows.Next() {
		var consumer, id string
		var processed time.Time
		if err := rows.Scan(&consumer, &id, &processed); err != nil {
			rows.Close()
			return fmt.Errorf("read the inbox: %w", err)
		}
		t.inbox[consumer]++
		switch consumer {
		case orders.ConsumerFulfilment:
			ph.events[at[id]].at[stepFulfilled] = processed
		case notify.Consumer:
			ph.events[at[id]].at[stepMailed] = processed
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the inbox: %w", err)
	}

	if err := env.pool.QueryRow(ctx, sqlPhaseShipped, ph.orders).Scan(&t.fulfilled, &t.fulfilments); err != nil {
		return fmt.Errorf("read the fulfilments: %w", err)
	}
	t.tallyReceipts(env.mail.Messages(""), ph.orders)
	return nil
}

// tallyReceipts counts the receipts among msgs of each of orders.
func (t *eventTally) tallyReceipts(msgs []mailer.Message, orders []string) {
	receipts := map[string]int{}
	for _, m := range msgs {
		if m.Kind == mailer.KindReceipt {
			receipts[m.Reference]++
		}
	}
	for _, id := range orders {
		n := receipts[id]
		t.receipts += n
		if n == 0 {
			t.missing++
		}
		t.extra += max(n-1, 0)
	}
}

// streamPage is how many entries one XRANGE reads.
const streamPage = 5000

// readStream calls visit with the event id and the time of each entry of
// stream, in the stream's order. An entry's time is that of its id: the
// Redis server's clock, in milliseconds, when the relay's XADD ran.
func readStream(ctx context.Context, rdb *redis.Client, stream string, visit func(id string, at time.Time)) error {
	start := "-"
	for {
		entries, err := rdb.XRangeN(ctx, stream, start, "+", streamPage).Result()
		if err != nil {
			return fmt.Errorf("read stream %s: %w", stream, err)
		}
		for _, e := range entries {
			ms, _, _ := strings.Cut(e.ID, "-")
			n, err := strconv.ParseInt(ms, 10, 64)
			if err != nil {
				return fmt.Errorf("stream %s: entry id %q: %w", stream, e.ID, err)
			}
			id, _ := e.Values[redisstream.UUIDHeaderKey].(string)
			visit(id, time.UnixMilli(n))
		}
		if len(entries) < streamPage {
			return nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}
