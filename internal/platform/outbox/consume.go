package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// Outcome is what a consumer made of one delivery.
type Outcome string

// The outcomes, as shop_events_consumed_total labels them.
const (
	// Processed: the consumer acted on the event and recorded it.
	Processed Outcome = "processed"
	// Duplicate: the inbox (or the provider's key) showed the event acted
	// on before; nothing was done again.
	Duplicate Outcome = "deduplicated"
	// Skipped: the row the event is about no longer allows the effect
	// (an order cancelled meanwhile); recorded, nothing done.
	Skipped Outcome = "skipped"
	// Failed: the event can never be acted on (a provider refused it for
	// good); acknowledged and logged, so it does not block the stream.
	Failed Outcome = "failed"
)

// ErrPermanent marks a handler's error that no redelivery can cure: the
// delivery is acknowledged as Failed. Any other error leaves the event
// unacknowledged, delivered again after a pause.
var ErrPermanent = errors.New("permanent")

// Consumer acts on events of some names.
type Consumer struct {
	// Name is the consumer's group on each stream and its name in the
	// inbox: "mailer", "fulfilment".
	Name   string
	Events []string
	// Handle acts on one delivery. It is called for copies of an event
	// too (redelivered, or delivered to two replicas at once), and must
	// make them one effect: the inbox and a keyed provider call.
	Handle func(ctx context.Context, e Event) (Outcome, error)
	// Concurrency is how many deliveries of each stream this process
	// handles at once; 1 when 0.
	Concurrency int
}

// Consuming settings: how long a delivery may stay unacknowledged before
// another consumer of the group claims it (a consumer killed mid-event),
// and how long a failed one waits before it is handed over again.
const (
	claimAfter  = 15 * time.Second
	nackPause   = time.Second
	readBlock   = time.Second
	resubscribe = time.Second
)

// Consume runs c on its streams on rdb, each named prefix and the event,
// until ctx ends. replica names this process in each consumer group.
func Consume(ctx context.Context, rdb *redis.Client, prefix string, c Consumer, replica string, m *Metrics, logger *slog.Logger) {
	var wg sync.WaitGroup
	for _, name := range c.Events {
		for i := range max(c.Concurrency, 1) {
			wg.Go(func() {
				consumeStream(ctx, rdb, c, prefix+name, fmt.Sprintf("%s-%d-%s", replica, i, uuid.NewString()[:8]), m, logger)
			})
		}
	}
	wg.Wait()
}

// consumeStream reads one stream as one member of c's group. A stream or
// group that disappears under it (Redis restarted empty) ends the
// subscription, and the next one creates the group again from the start
// of whatever the stream holds now; the redelivery brings back what was
// lost with the old one.
func consumeStream(ctx context.Context, rdb *redis.Client, c Consumer, stream, member string, m *Metrics, logger *slog.Logger) {
	wm := quietLogger(logger)
	for ctx.Err() == nil {
		// The subscription's own context: its end stops its goroutines.
		// Subscriber.Close would close rdb too, which every subscription
		// of this process shares.
		subCtx, cancel := context.WithCancel(ctx)
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:                        rdb,
			Consumer:                      member,
			ConsumerGroup:                 c.Name,
			NackResendSleep:               nackPause,
			BlockTime:                     readBlock,
			ClaimInterval:                 5 * time.Second,
			MaxIdleTime:                   claimAfter,
			OldestId:                      "0",
			DisableIndefiniteInitialBlock: true,
			ShouldStopOnReadErrors:        func(err error) bool { return strings.HasPrefix(err.Error(), "NOGROUP") },
		}, wm)
		if err != nil {
			cancel()
			logger.ErrorContext(ctx, "events: subscriber", "consumer", c.Name, "err", err)
			return
		}
		msgs, err := sub.Subscribe(subCtx, stream)
		if err == nil {
			for msg := range msgs {
				e, err := FromMessage(msg)
				if err != nil {
					logger.WarnContext(ctx, "events: not an event; dropped", "consumer", c.Name, "stream", stream, "err", err)
					msg.Ack()
					continue
				}
				outcome, err := handle(ctx, msg, c, e)
				switch {
				case err == nil:
					m.consumed(c.Name, e.Name, outcome)
					msg.Ack()
				case errors.Is(err, ErrPermanent):
					m.consumed(c.Name, e.Name, Failed)
					logger.ErrorContext(ctx, "events: failed for good", "consumer", c.Name, "event", e.Name, "id", e.ID, "subject", e.Subject, "err", err)
					msg.Ack()
				default:
					m.retried(c.Name, e.Name, retryReason(err))
					if ctx.Err() == nil {
						logger.WarnContext(ctx, "events: will try again", "consumer", c.Name, "event", e.Name, "id", e.ID, "err", err)
					}
					msg.Nack()
				}
			}
		} else if ctx.Err() == nil {
			logger.WarnContext(ctx, "events: subscribe", "consumer", c.Name, "stream", stream, "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(resubscribe):
		}
	}
}

// handle runs c's Handle on one delivery, in a span "consume <event>"
// that continues the trace of the transaction that wrote the event (its
// metadata carries it): a paid order's receipt is part of its payment's
// trace.
func handle(ctx context.Context, msg *message.Message, c Consumer, e Event) (outcome Outcome, err error) {
	ctx = tracing.Extract(ctx, msg.Metadata)
	hctx, span := tracing.Start(ctx, "consume "+e.Name, attrConsumer.String(c.Name),
		attrEventID.String(e.ID), attrSubject.String(e.Subject))
	defer func() {
		span.SetAttributes(attrOutcome.String(string(outcome)))
		tracing.End(span, err)
	}()
	// The delivery's own context bounds the work; the span rides on it.
	return c.Handle(trace.ContextWithSpan(msg.Context(), trace.SpanFromContext(hctx)), e)
}

// retryReason labels a delivery left for later: the problem code of
// its error (unavailable: a lock's quorum or a provider out;
// resource_busy: a lock held), or "error".
func retryReason(err error) string {
	if code := problem.CodeOf(err); code != "" {
		return string(code)
	}
	return "error"
}

// The inbox: one row per consumer and event it acted on (inbox_pkey).
const (
	sqlSeen   = `SELECT EXISTS (SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2)`
	sqlRecord = `INSERT INTO inbox (consumer, event_id, event, processed_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING`
)

// ConstraintInbox admits one inbox row per consumer and event.
const ConstraintInbox = "inbox_pkey"

// Querier runs a query: a pool or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Inbox is the consumers' record of the events they acted on, layer 0 of
// a consumer: one row per consumer and event (inbox_pkey). NewInbox is
// the table; a layer test hands a consumer one that has seen nothing
// (harness/variants).
type Inbox interface {
	// Seen reports whether consumer has recorded e.
	Seen(ctx context.Context, consumer string, e Event) (bool, error)
	// QueueRecord queues in b consumer's row for e: sent in the
	// transaction of what the consumer did, in one of its round trips.
	// Once b is sent, *fresh is false when the row was there already:
	// another delivery recorded e first, and the caller rolls back what
	// it did.
	QueueRecord(b *pgx.Batch, consumer string, e Event, now time.Time, fresh *bool)
}

// NewInbox returns the inbox table, read on db.
func NewInbox(db Querier) Inbox { return inbox{db: db} }

type inbox struct{ db Querier }

func (i inbox) Seen(ctx context.Context, consumer string, e Event) (bool, error) {
	return Seen(ctx, i.db, consumer, e)
}

func (i inbox) QueueRecord(b *pgx.Batch, consumer string, e Event, now time.Time, fresh *bool) {
	QueueRecord(b, consumer, e, now, fresh)
}

// Seen reports whether consumer has recorded e in its inbox.
func Seen(ctx context.Context, db Querier, consumer string, e Event) (bool, error) {
	var seen bool
	if err := db.QueryRow(ctx, sqlSeen, consumer, e.ID).Scan(&seen); err != nil {
		return false, fmt.Errorf("inbox of %s: %w", consumer, err)
	}
	return seen, nil
}

// QueueRecord queues in b consumer's inbox row for e. Once b is sent,
// *fresh is false when the row was there already: another delivery
// recorded e first, and the caller rolls back what it did. A row another
// transaction is inserting makes this one wait for its end.
func QueueRecord(b *pgx.Batch, consumer string, e Event, now time.Time, fresh *bool) {
	b.Queue(sqlRecord, consumer, e.ID, e.Name, now).Exec(func(tag pgconn.CommandTag) error {
		*fresh = tag.RowsAffected() == 1
		return nil
	})
}
