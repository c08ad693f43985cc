//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The events after the commit (DESIGN.md §9) under the same faults: each
// scenario ends with an audit of what the consumers made of every event
// the run so far committed. Every paid order must end fulfilled once
// (unless it was refunded whole first), every order ever paid with one
// receipt at the mailer, every booking with one ticket and every refund
// that succeeded with one refund mail, and nothing else mailed, whatever
// the fault did to the relay, the streams (on the first Redis node: rows
// 2, 3a and 3b take it away), the consumers or the provider.

// eventsWithin bounds the wait for the consumers to catch up after a
// scenario: an event no consumer recorded is published again 2 s after
// its commit (SHOP_OUTBOX_REDELIVER_AFTER), then after 4, 8 and 16 s more.
const eventsWithin = 45 * time.Second

// eventsAudit is what the consumers did with the events committed so far.
type eventsAudit struct {
	paid        int // orders paid (and fulfilled or refunded since, or not)
	receipts    int // receipts at the mailer
	bookings    int
	tickets     int
	refunds     int // refunds that succeeded
	refundMails int // refund mails at the mailer
	// caughtUp is how long after the audit began every event had its
	// effect; -1 when they had not within eventsWithin.
	caughtUp time.Duration
	problems []string
}

// eventsState is one reading of the consumers' effects.
type eventsState struct {
	paid, unfulfilled, badFulfilments int
	bookings, refunds                 int
	// per reference: receipts for orders, tickets for bookings, refund
	// mails for refunds
	receipts, tickets, refundMails map[string]int
	paidIDs, bookingIDs, refundIDs map[string]bool
	// otherMails are messages of a kind the shop does not send.
	otherMails int
}

// done reports whether every event has its one effect. A stray effect,
// one for something the database does not hold (a receipt for a payment
// a failover lost), does not keep it false: readEvents reads the mailer
// before the database, so a stray cannot be the effect of a commit it
// has not seen yet, and waiting cannot take it back. The audit counts
// it.
func (s eventsState) done() bool {
	if s.unfulfilled != 0 || s.badFulfilments != 0 {
		return false
	}
	for id := range s.paidIDs {
		if s.receipts[id] != 1 {
			return false
		}
	}
	for id := range s.bookingIDs {
		if s.tickets[id] != 1 {
			return false
		}
	}
	for id := range s.refundIDs {
		if s.refundMails[id] != 1 {
			return false
		}
	}
	return true
}

// summary is the reading as a string that changes when anything does.
func (s eventsState) summary() string {
	n := 0
	for _, k := range s.receipts {
		n += k
	}
	for _, k := range s.tickets {
		n += k
	}
	for _, k := range s.refundMails {
		n += k
	}
	return fmt.Sprint(s.paid, s.unfulfilled, s.badFulfilments, s.bookings, s.refunds, n, s.otherMails)
}

// eventsQuiet is how long the consumers' effects must stay unchanged
// once every event has its own: a late copy would show in it. The audit
// is cumulative, so a copy later still is found by the next scenario's.
const eventsQuiet = time.Second

// settledEvents is the consumers' effects as settle last read them, and
// since when they had not changed.
type settledEvents struct {
	summary string
	since   time.Time
}

// checkEvents waits until every event committed so far has its effect and
// nothing has changed for eventsQuiet, at most eventsWithin, then audits.
func checkEvents(t *testing.T, c *cluster) eventsAudit {
	t.Helper()
	start := time.Now()
	a := eventsAudit{caughtUp: -1}
	var s eventsState
	// The settle before the audit watched the same reading: what stayed
	// still there counts towards eventsQuiet.
	last, lastChange := c.settled.summary, c.settled.since
	if last == "" {
		lastChange = time.Now()
	}
	for {
		var err error
		if s, err = readEvents(c); err != nil {
			t.Fatalf("events audit: %v", err)
		}
		if sum := s.summary(); sum != last {
			last, lastChange = sum, time.Now()
		}
		if s.done() && a.caughtUp < 0 {
			a.caughtUp = time.Since(start)
		}
		if (s.done() && time.Since(lastChange) >= eventsQuiet) || time.Since(start) > eventsWithin {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	a.paid, a.bookings, a.refunds = s.paid, s.bookings, s.refunds
	problem := func(format string, args ...any) { a.problems = append(a.problems, fmt.Sprintf(format, args...)) }
	if s.unfulfilled > 0 {
		problem("%d paid orders not fulfilled %s after the run", s.unfulfilled, eventsWithin)
	}
	if s.badFulfilments > 0 {
		problem("%d orders whose status disagrees with their fulfilment row", s.badFulfilments)
	}
	if s.otherMails > 0 {
		problem("%d mails of a kind the shop does not send", s.otherMails)
	}
	tally := func(kind string, owed map[string]bool, got map[string]int) int {
		var missing, extra, stray, total int
		for ref, n := range got {
			total += n
			if !owed[ref] {
				stray += n
			} else if n > 1 {
				extra += n - 1
			}
		}
		for ref := range owed {
			if got[ref] == 0 {
				missing++
			}
		}
		if missing > 0 {
			problem("%d %ss missing %s after the run", missing, kind, eventsWithin)
		}
		if extra > 0 {
			problem("%d %ss sent more than once", extra, kind)
		}
		if stray > 0 {
			problem("%d %ss for something that did not happen", stray, kind)
		}
		return total
	}
	a.receipts = tally("receipt", s.paidIDs, s.receipts)
	a.tickets = tally("ticket", s.bookingIDs, s.tickets)
	a.refundMails = tally("refund mail", s.refundIDs, s.refundMails)
	return a
}

// readEvents reads the orders, the bookings, the refunds and the mailer's
// audit.
func readEvents(c *cluster) (eventsState, error) {
	ctx := context.Background()
	s := eventsState{paidIDs: map[string]bool{}, bookingIDs: map[string]bool{}, refundIDs: map[string]bool{},
		receipts: map[string]int{}, tickets: map[string]int{}, refundMails: map[string]int{}}
	// The mailer first: a mail is sent after its event's commit, so
	// everything it names is in the database read after it, unless a
	// failover lost it.
	msgs, err := mailerMessages(c)
	if err != nil {
		return s, err
	}
	for _, m := range msgs {
		switch m.Kind {
		case "receipt":
			s.receipts[m.Reference]++
		case "ticket":
			s.tickets[m.Reference]++
		case "refund":
			s.refundMails[m.Reference]++
		default:
			s.otherMails++
		}
	}
	// A fulfilled order has its fulfilment row, and an order that is
	// neither fulfilled nor refunded has none; a refunded order may have
	// one, when it shipped before its last refund.
	if err := c.db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM orders WHERE status = 'paid')::int,
		(SELECT count(*) FROM orders o WHERE o.status <> 'refunded' AND (o.status = 'fulfilled') <>
			EXISTS (SELECT 1 FROM fulfilments f WHERE f.order_id = o.id))::int`).Scan(&s.unfulfilled, &s.badFulfilments); err != nil {
		return s, fmt.Errorf("orders: %w", err)
	}
	for query, ids := range map[string]map[string]bool{
		// Every order that was paid owes its receipt, one refunded since
		// included.
		`SELECT id::text FROM orders WHERE status IN ('paid', 'fulfilled', 'refunded')`: s.paidIDs,
		`SELECT id::text FROM bookings`:                           s.bookingIDs,
		`SELECT id::text FROM refunds WHERE status = 'succeeded'`: s.refundIDs,
	} {
		rows, err := c.db.Query(ctx, query)
		if err != nil {
			return s, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return s, err
			}
			ids[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return s, err
		}
	}
	s.paid, s.bookings, s.refunds = len(s.paidIDs), len(s.bookingIDs), len(s.refundIDs)
	return s, nil
}

// mailerMessage is what the audit reads of a message.
type mailerMessage struct {
	Reference string    `json:"reference"`
	Kind      string    `json:"kind"`
	CreatedAt time.Time `json:"created_at"`
}

// mailerMessages is the mailer's own audit of what it sent, read
// straight from it, not through the fault proxy.
func mailerMessages(c *cluster) ([]mailerMessage, error) {
	res, err := http.Get(c.mailer.url + "/v1/messages")
	if err != nil {
		return nil, fmt.Errorf("mailer: %w", err)
	}
	defer res.Body.Close()
	var body struct {
		Items []mailerMessage `json:"items"`
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("mailer: %s", res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("mailer: %w", err)
	}
	return body.Items, nil
}

// mailerFaults sets the mailer's run-time faults (PUT /v1/faults): the
// fraction of new messages it refuses with 503, and how long it holds back
// every answer after the message is sent.
func (c *cluster) mailerFaults(failRate float64, delay time.Duration) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"fail_rate": failRate, "delay_ms": delay.Milliseconds()})
	req, err := http.NewRequest(http.MethodPut, c.mailer.url+"/v1/faults", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("mailer faults: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		c.t.Fatalf("mailer faults: %s", res.Status)
	}
}

// eventCounts reads what a replica's relay and consumers counted.
func eventCounts(p *process, out map[string]float64) {
	scrape(p, func(name, labels string, value float64) {
		switch name {
		case "shop_outbox_published_total":
			out["events published"] += value
		case "shop_outbox_redelivered_total":
			out["events redelivered"] += value
		case "shop_events_consumed_total":
			out["events "+labelValue(labels, "outcome")] += value
		case "shop_events_retried_total":
			out["events retried"] += value
		}
	})
}

// eventsLine is what the relay and the consumers counted over a scenario,
// and what the audit found.
func eventsLine(sum map[string]float64, a eventsAudit) string {
	caught := "not within " + eventsWithin.String()
	if a.caughtUp >= 0 {
		caught = a.caughtUp.Round(250 * time.Millisecond).String()
	}
	return fmt.Sprintf("events published %.0f, redelivered %.0f, consumed %.0f (deduplicated %.0f, skipped %.0f, failed %.0f), retried %.0f; "+
		"every effect there %s after the run; %d paid orders, %d receipts; %d bookings, %d tickets; %d refunds, %d refund mails",
		sum["events published"], sum["events redelivered"],
		sum["events processed"]+sum["events deduplicated"]+sum["events skipped"]+sum["events failed"],
		sum["events deduplicated"], sum["events skipped"], sum["events failed"], sum["events retried"],
		caught, a.paid, a.receipts, a.bookings, a.tickets, a.refunds, a.refundMails)
}
