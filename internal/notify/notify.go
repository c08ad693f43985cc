// Package notify mails what a customer is owed after a commit: one receipt
// per paid order (on order.paid), one ticket per booking (on
// booking.confirmed) and one refund mail per refund that succeeded (on
// order.refunded), through a mail provider reached over HTTP (`shop
// mailer` stands in for one). It is a consumer of package outbox:
//
//	0 idempotency   the inbox: the event's row (consumer "mailer", event
//	                id), read first and written once the provider took
//	                the mail; and the provider call keyed by the event's
//	                id, so that copies racing each other, or a copy after
//	                a crash between the send and the inbox row, are one
//	                mail at the provider
//	2 state         the row still allows the mail: the order was paid
//	                (paid, or fulfilled or refunded since), the booking
//	                exists, the refund succeeded; asked before the call,
//	                never of the event's claim
//
// The provider's memory of a key is bounded (a day at most providers, and
// at `shop mailer`, SHOP_MAILER_KEY_TTL): the inbox is what stops a copy
// that comes later than that, such as a redelivery after Redis lost its
// streams. No transaction is open during the call, as in the pay flow.
package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/mail"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// Consumer is the consumer's group and its name in the inbox.
const Consumer = "mailer"

// flowMail names the consumer in the conflict counter.
const flowMail = "mail"

// The kinds of mail.
const (
	KindReceipt = mail.KindReceipt
	KindTicket  = mail.KindTicket
	KindRefund  = mail.KindRefund
)

// Events are the events the consumer acts on.
var Events = []string{outbox.OrderPaid, outbox.BookingConfirmed, outbox.OrderRefunded}

// Mail is one message for the provider.
type Mail struct {
	Reference string // the order's, the booking's or the refund's id
	Kind      string // KindReceipt, KindTicket or KindRefund
	To        string
	Subject   string
	Text      string
}

// Sender hands a mail to the provider under an idempotency key. An error
// wrapping outbox.ErrPermanent is a refusal no retry cures; any other is
// tried again later with the same key.
type Sender interface {
	Send(ctx context.Context, key string, m Mail) error
}

// Config holds what the service is built from.
type Config struct {
	DB      *pgxpool.Pool
	Sender  Sender
	Metrics *metrics.Metrics
	Now     func() time.Time
	// Inbox is layer 0; nil is production's (outbox.NewInbox(DB)). The
	// ablation test hands in one that has seen nothing
	// (harness/variants.NoInbox).
	Inbox outbox.Inbox
}

// Service is the mailing consumer.
type Service struct {
	db    *pgxpool.Pool
	send  Sender
	inbox outbox.Inbox
	now   func() time.Time
	flow  layers.Flow
}

// New returns the consumer.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Sender == nil {
		return nil, errors.New("notify: a pool and a sender are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Inbox == nil {
		cfg.Inbox = outbox.NewInbox(cfg.DB)
	}
	return &Service{db: cfg.DB, send: cfg.Sender, inbox: cfg.Inbox, now: cfg.Now,
		flow: layers.Flow{Name: flowMail, Noun: "mail", Metrics: cfg.Metrics}}, nil
}

// Consumer is the service as an outbox consumer.
func (s *Service) Consumer(concurrency int) outbox.Consumer {
	return outbox.Consumer{Name: Consumer, Events: Events, Handle: s.Handle, Concurrency: concurrency}
}

// Handle acts on one delivery.
func (s *Service) Handle(ctx context.Context, e outbox.Event) (outbox.Outcome, error) {
	// Layer 0: the inbox, before anything else.
	seen, err := s.inbox.Seen(ctx, Consumer, e)
	if err != nil || seen {
		if seen {
			s.flow.Stopped(ctx, layers.Idempotency)
		}
		return outbox.Duplicate, err
	}
	// Layer 2: the row as it is now.
	mail, ok, err := s.compose(ctx, e)
	if err != nil {
		return outbox.Processed, err
	}
	outcome := outbox.Processed
	if ok {
		// The call, keyed by the event: one mail per event at the
		// provider, for as long as it remembers the key.
		if err := s.send.Send(ctx, "evt_"+e.ID, mail); err != nil {
			if errors.Is(err, outbox.ErrPermanent) {
				// Refused for good: recorded for an operator to see
				// and replay (outbox.GiveUp) before it is acknowledged.
				err = outbox.GiveUp(ctx, s.db, Consumer, e, err, s.now().UTC())
			}
			return outbox.Processed, err
		}
	} else {
		s.flow.Stopped(ctx, layers.State)
		outcome = outbox.Skipped
	}
	// The inbox row, one statement in a round trip of its own.
	var fresh bool
	b := &pgx.Batch{}
	s.inbox.QueueRecord(b, Consumer, e, s.now().UTC(), &fresh)
	err = s.db.SendBatch(ctx, b).Close()
	if err == nil && !fresh {
		// A copy raced this one to the provider; the key made them one
		// mail, and the copy recorded it first.
		s.flow.Stopped(ctx, layers.Idempotency)
		outcome = outbox.Duplicate
	}
	return outcome, err
}

const (
	sqlReceipt = `SELECT o.status, o.user_id, o.total_cents,
			array_agg(i.sku ORDER BY i.sku), array_agg(i.quantity ORDER BY i.sku)
		FROM orders o JOIN order_items i ON i.order_id = o.id
		WHERE o.id = $1 GROUP BY o.id`
	sqlTicket = `SELECT b.user_id, b.seats, e.name FROM bookings b JOIN events e ON e.id = b.event_id WHERE b.id = $1`
	sqlRefund = `SELECT r.status, r.order_id::text, o.user_id, r.amount_cents,
			coalesce(array_agg(i.sku ORDER BY i.sku) FILTER (WHERE i.sku IS NOT NULL), '{}'),
			coalesce(array_agg(i.quantity ORDER BY i.sku) FILTER (WHERE i.sku IS NOT NULL), '{}')
		FROM refunds r JOIN orders o ON o.id = r.order_id LEFT JOIN refund_items i ON i.refund_id = r.id
		WHERE r.id = $1 GROUP BY r.id, o.id`
)

// paidStatuses are the statuses of an order that was paid: its receipt
// is owed in each, a refund or a shipment since included.
var paidStatuses = []string{"paid", "fulfilled", "refunded"}

// compose reads the row e is about and writes its mail; ok is false when
// the row no longer allows one.
func (s *Service) compose(ctx context.Context, e outbox.Event) (Mail, bool, error) {
	switch e.Name {
	case outbox.OrderPaid:
		var status, user string
		var total int64
		var skus []string
		var qtys []int32
		err := s.db.QueryRow(ctx, sqlReceipt, e.Subject).Scan(&status, &user, &total, &skus, &qtys)
		if errors.Is(err, pgx.ErrNoRows) {
			return Mail{}, false, nil
		}
		if err != nil {
			return Mail{}, false, fmt.Errorf("receipt of %s: %w", e.Subject, err)
		}
		if !slices.Contains(paidStatuses, status) {
			return Mail{}, false, nil
		}
		return receipt(e.Subject, user, total, skus, qtys), true, nil
	case outbox.OrderRefunded:
		var status, order, user string
		var amount int64
		var skus []string
		var qtys []int32
		err := s.db.QueryRow(ctx, sqlRefund, e.Subject).Scan(&status, &order, &user, &amount, &skus, &qtys)
		if errors.Is(err, pgx.ErrNoRows) {
			return Mail{}, false, nil
		}
		if err != nil {
			return Mail{}, false, fmt.Errorf("refund mail of %s: %w", e.Subject, err)
		}
		if status != "succeeded" {
			// Only a refund that gave the money back is mailed.
			return Mail{}, false, nil
		}
		return refund(e.Subject, order, user, amount, skus, qtys), true, nil
	case outbox.BookingConfirmed:
		var user, event string
		var seats []string
		err := s.db.QueryRow(ctx, sqlTicket, e.Subject).Scan(&user, &seats, &event)
		if errors.Is(err, pgx.ErrNoRows) {
			return Mail{}, false, nil
		}
		if err != nil {
			return Mail{}, false, fmt.Errorf("ticket of %s: %w", e.Subject, err)
		}
		return ticket(e.Subject, user, event, seats), true, nil
	}
	return Mail{}, false, nil
}

// The mails. A subject or a text holds user data (an event's name of up
// to 200 characters, an order's SKUs) and is fitted to the provider's
// bounds (mail.Fit): a mail the provider refused would never be sent,
// whatever the redelivery did.

// receipt is the mail of order's payment. One line: the provider's API,
// like the shop's, takes no control characters in a string.
func receipt(order, user string, total int64, skus []string, qtys []int32) Mail {
	text := fmt.Sprintf("Thank you for your order %s: %s. Paid: %s.", order, units(skus, qtys), money(total))
	return Mail{Reference: order, Kind: KindReceipt, To: address(user),
		Subject: mail.Fit("Your receipt for order "+order, mail.MaxSubject), Text: mail.Fit(text, mail.MaxText)}
}

// refund is the mail of one refund of order that gave amount back, and
// the units it returned, if any. Its reference is the refund: an order
// refunded in parts gets one mail per part.
func refund(id, order, user string, amount int64, skus []string, qtys []int32) Mail {
	text := fmt.Sprintf("Refund %s of your order %s: %s given back to your card.", id, order, money(amount))
	if len(skus) > 0 {
		text += fmt.Sprintf(" Returned: %s.", units(skus, qtys))
	}
	return Mail{Reference: id, Kind: KindRefund, To: address(user),
		Subject: mail.Fit("Your refund for order "+order, mail.MaxSubject), Text: mail.Fit(text, mail.MaxText)}
}

// units is an order's or a return's lines: "2 × SKU-A, 1 × SKU-B".
func units(skus []string, qtys []int32) string {
	lines := make([]string, len(skus))
	for i := range skus {
		lines[i] = fmt.Sprintf("%d × %s", qtys[i], skus[i])
	}
	return strings.Join(lines, ", ")
}

// money is an amount in cents as the mails write it: 12.50.
func money(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

// ticket is the mail of booking's seats for the event named event.
func ticket(booking, user, event string, seats []string) Mail {
	return Mail{Reference: booking, Kind: KindTicket, To: address(user),
		Subject: mail.Fit("Your tickets for "+event, mail.MaxSubject),
		Text:    mail.Fit(fmt.Sprintf("Booking %s: seats %s.", booking, strings.Join(seats, ", ")), mail.MaxText)}
}

// address is where a user's mail goes: users have no address of their
// own in the demo, so one is made of their id.
func address(userID string) string { return "user-" + userID + "@shop.example" }
