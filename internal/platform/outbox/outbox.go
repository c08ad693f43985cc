// Package outbox carries what a flow committed to whoever acts on it next:
// a receipt mailed once per paid order, a ticket once per booking, a paid
// order fulfilled once. It is a transactional outbox on watermill
// (github.com/ThreeDotsLabs/watermill):
//
//	flow's transaction ──▶ watermill_outbox ──relay──▶ Redis stream ──▶ consumer
//	  (the change and        (watermill-sql,   (a batch,   (redisstream,   (inbox row in its
//	   its event commit       one row per       one XADD    a consumer      own transaction,
//	   together)              event)            pipeline)   group each)     the effect keyed)
//
// # Where each guarantee comes from
//
//   - Never lost, never invented: an event is a row written by the
//     transaction that makes the change (Write, Queue). A rollback takes it
//     away with the change; a commit keeps both. Nothing is published
//     before the commit, so a crash between the commit and the broker loses
//     nothing: the relay publishes from the table.
//   - At least once: the relay (Relay.Forward) publishes a batch of rows to
//     their streams and only then moves its offset, in one transaction that
//     holds the offsets row; a relay killed mid-batch publishes the batch
//     again. A broker that lost what it was given (Redis restarted
//     empty, a stream trimmed, a consumer group gone) is covered by the
//     redelivery (Relay.Redeliver): an event that a consumer has not
//     recorded in its inbox some time after it was written is published
//     again from the table, whatever happened to the first copy.
//   - Exactly once in effect: a consumer records each event it acted on in
//     its inbox (one row per consumer and event, inbox_pkey) in its own
//     transaction, and skips an event it finds there; an effect outside the
//     database (a mail) is keyed by the event's id, so a delivery that races
//     another, or follows a crash after the effect and before the inbox row,
//     asks the provider for what it already did.
//   - One event per fact: an event's id is derived from its name and
//     subject (EventID), and outbox_one_per_event refuses a second row
//     with it, so a flow that ran twice could not announce twice.
//
// Ordering is the rows', not the broker's: a consumer acts on the state it
// reads under its lock, never on what an event claims, so an event that
// arrives after a later one (a paid order's event after its fulfilment)
// finds the row moved on and changes nothing.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// The events, by name.
const (
	OrderPaid        = "order.paid"
	OrderCancelled   = "order.cancelled"
	OrderExpired     = "order.expired"
	OrderRefunded    = "order.refunded" // one per refund that succeeded: its subject is the refund's id
	BookingConfirmed = "booking.confirmed"
)

// Topic is the forwarder's topic: the table watermill_outbox
// (migrations/000012_outbox.up.sql) holds every event as an envelope that
// names its stream.
const Topic = "outbox"

// ConstraintOnePerEvent refuses a second row of one event (EventID).
const ConstraintOnePerEvent = "outbox_one_per_event"

// Constraints is the outbox's part of layer 4: a flow that moved an order
// twice (cancelled it twice, paid it twice) would announce the move twice,
// and the second announcement rolls the second move back.
var Constraints = []postgres.Constraint{
	{Table: "watermill_outbox", Name: ConstraintOnePerEvent, Index: true},
}

// DefaultPrefix starts the name of each event's Redis stream:
// shop:events:order.paid. The outbox's rows name the event only; the
// relay and the consumers put the prefix in front (Options.Prefix), so
// that stacks sharing one Redis keep their streams apart.
const DefaultPrefix = "shop:events:"

// Metadata keys of a published message.
const (
	metaEvent   = "event"
	metaSubject = "subject"
	metaAt      = "at"
)

// namespace derives event ids (EventID).
var namespace = uuid.MustParse("5b0f2c4e-8a57-4d0e-9a4b-2f6f1d0e7c31")

// EventID is the id of the event name about subject: the same for every
// copy of one fact, so the outbox can refuse a second one and a consumer
// can key its effect by it.
func EventID(name, subject string) string {
	return uuid.NewSHA1(namespace, []byte(name+"/"+subject)).String()
}

// Event is a fact a transaction committed.
type Event struct {
	ID      string    // EventID(Name, Subject)
	Name    string    // OrderPaid, …
	Subject string    // the order's or the booking's id
	At      time.Time // when the change was made
	Data    []byte    // the event's body, JSON
}

// New returns the event name about subject at t, with data as its body.
func New(name, subject string, at time.Time, data any) (Event, error) {
	body, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("event %s of %s: %w", name, subject, err)
	}
	return Event{ID: EventID(name, subject), Name: name, Subject: subject, At: at.UTC(), Data: body}, nil
}

// message is the event as watermill carries it.
func (e Event) message() *message.Message {
	m := message.NewMessage(e.ID, e.Data)
	m.Metadata.Set(metaEvent, e.Name)
	m.Metadata.Set(metaSubject, e.Subject)
	m.Metadata.Set(metaAt, e.At.Format(time.RFC3339Nano))
	return m
}

// FromMessage reads the event a consumer received.
func FromMessage(m *message.Message) (Event, error) {
	at, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(metaAt))
	if err != nil {
		return Event{}, fmt.Errorf("event %s: at: %w", m.UUID, err)
	}
	e := Event{ID: m.UUID, Name: m.Metadata.Get(metaEvent), Subject: m.Metadata.Get(metaSubject), At: at, Data: m.Payload}
	if _, err := uuid.Parse(e.ID); err != nil || e.Name == "" || e.Subject == "" {
		return Event{}, fmt.Errorf("event %q: not an event of the outbox", m.UUID)
	}
	return e, nil
}

// Write inserts events into the outbox inside tx, in one statement.
func Write(ctx context.Context, tx pgx.Tx, events ...Event) error {
	return publish(ctx, wsql.TxFromPgx(tx), events)
}

// Queue queues the insert of events in b, a batch of the transaction that
// makes the change: the row travels with the change's own statements, and
// its error, if any, comes back with the batch's results.
func Queue(ctx context.Context, b *pgx.Batch, events ...Event) error {
	return publish(ctx, queued{b}, events)
}

// publish inserts events through watermill-sql's publisher wrapped in the
// forwarder's: the rows are exactly what the relay reads.
func publish(ctx context.Context, db wsql.ContextExecutor, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	if d := deferred(ctx); d != nil {
		d.events = append(d.events, events...)
		return nil
	}
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schema}, nil)
	if err != nil {
		return err
	}
	msgs := make([]*message.Message, len(events))
	for i, e := range events {
		msgs[i] = e.message()
		msgs[i].SetContext(ctx)
		// The transaction's trace travels with its events: the relay's
		// publish and each consumer's delivery continue it.
		tracing.Inject(ctx, msgs[i].Metadata)
	}
	// One call: every event of the transaction in one INSERT. The
	// forwarder groups by topic, so events of several names go one call
	// each.
	fw := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: Topic})
	for start := 0; start < len(events); {
		end := start + 1
		for end < len(events) && events[end].Name == events[start].Name {
			end++
		}
		if err := fw.Publish(events[start].Name, msgs[start:end]...); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		start = end
	}
	return nil
}

// The events the outbox holds: of some names, or one by its id
// (outbox_one_per_event), in the order they were written.
const (
	sqlStored = `SELECT payload::text FROM watermill_outbox
	WHERE payload->>'destination_topic' = ANY($1) ORDER BY "offset"`
	sqlLookup = `SELECT payload::text FROM watermill_outbox WHERE payload->>'uuid' = $1`
)

// ErrNoEvent means the outbox holds no such event.
var ErrNoEvent = errors.New("no such event in the outbox")

// Stored returns the events of the given names the outbox holds, in the
// order they were written: what a redelivery would publish again.
func Stored(ctx context.Context, db Querier, names ...string) ([]Event, error) {
	return stored(ctx, db, sqlStored, names)
}

// Lookup returns the event name about subject as the outbox holds it.
func Lookup(ctx context.Context, db Querier, name, subject string) (Event, error) {
	events, err := stored(ctx, db, sqlLookup, EventID(name, subject))
	if err != nil {
		return Event{}, err
	}
	if len(events) == 0 {
		return Event{}, fmt.Errorf("%s of %s: %w", name, subject, ErrNoEvent)
	}
	return events[0], nil
}

func stored(ctx context.Context, db Querier, query string, arg any) ([]Event, error) {
	rows, err := db.Query(ctx, query, arg)
	if err != nil {
		return nil, fmt.Errorf("stored events: %w", err)
	}
	raw, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("stored events: %w", err)
	}
	events := make([]Event, 0, len(raw))
	for _, r := range raw {
		_, m, err := unwrap(r)
		if err != nil {
			return nil, err
		}
		e, err := FromMessage(m)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, nil
}

// schema is watermill-sql's PostgreSQL schema; the migration created its
// table, so the publisher never creates one inside a flow's transaction.
var schema = wsql.DefaultPostgreSQLSchema{}

// queued is a ContextExecutor that queues each statement in a batch.
type queued struct{ b *pgx.Batch }

func (q queued) ExecContext(_ context.Context, query string, args ...any) (wsql.Result, error) {
	q.b.Queue(query, args...)
	return queuedResult{}, nil
}

func (q queued) QueryContext(context.Context, string, ...any) (wsql.Rows, error) {
	return nil, errors.New("outbox: a queued statement has no rows")
}

type queuedResult struct{}

func (queuedResult) RowsAffected() (int64, error) { return 0, nil }

// Deferred is the outbox taken off, for the ablation test that shows what
// it prevents: the events of the transactions run with ctx are kept in
// memory instead of written, and published by Publish once the caller's
// transaction has committed, as a flow that "publishes after the commit"
// does. A process that dies between the commit and Publish loses them.
type Deferred struct {
	events []Event
}

type deferredKey struct{}

// Defer returns ctx with d collecting the events written under it.
func Defer(ctx context.Context, d *Deferred) context.Context {
	return context.WithValue(ctx, deferredKey{}, d)
}

func deferred(ctx context.Context) *Deferred {
	d, _ := ctx.Value(deferredKey{}).(*Deferred)
	return d
}

// Take returns the events collected so far and forgets them.
func (d *Deferred) Take() []Event {
	out := d.events
	d.events = nil
	return out
}
