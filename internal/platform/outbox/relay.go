package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/jobs"
	"github.com/shop-example/shop/internal/platform/tracing"
)

// relayGroup is the relay's consumer group in watermill_offsets_outbox:
// every replica's relay shares it, so the rows are published in their
// order by whichever holds the offsets row.
const relayGroup = "relay"

// Defaults of Options.
const (
	DefaultRedeliverAfter = 30 * time.Second
	DefaultRetention      = 24 * time.Hour
	// streamMaxLen bounds each Redis stream (approximately, XADD MAXLEN
	// ~): an event trimmed before a consumer read it is redelivered from
	// the outbox.
	streamMaxLen = 100_000
	// redeliverBatch bounds one pass of the redelivery.
	redeliverBatch = 500
	// pollInterval is how long the relay waits when it found nothing new.
	pollInterval = 100 * time.Millisecond
)

// Options configure a Relay.
type Options struct {
	// Consumers name, per event, the consumers that must record it in
	// their inbox: the redelivery publishes an event again while one of
	// them has not.
	Consumers map[string][]string
	// RedeliverAfter is how old an event a consumer has not recorded must
	// be before it is published again; DefaultRedeliverAfter when 0. Each
	// further redelivery of one event waits twice as long as the last.
	RedeliverAfter time.Duration
	// Retention is how long events and inbox rows are kept;
	// DefaultRetention when 0. An event is redelivered only within it.
	Retention time.Duration
	// Interval is how often the redelivery and the lag run.
	Interval time.Duration
	// Prefix starts each stream's name; DefaultPrefix when empty.
	Prefix  string
	Metrics *Metrics // nil counts nothing
	Logger  *slog.Logger
	// Tracing makes a span of each publish, in the trace of the
	// transaction that wrote the event; nil makes none.
	Tracing trace.TracerProvider
}

// Relay publishes the outbox to Redis streams, publishes again what a
// consumer did not record, keeps the tables within their retention, and
// measures the lag. Every replica runs one; they share the work through
// the offsets row and the redelivery claims.
type Relay struct {
	db     *pgxpool.Pool
	rdb    *redis.Client
	opts   Options
	logger *slog.Logger
	wm     watermill.LoggerAdapter
	pub    message.Publisher
	schema relaySchema // what the forwarder reads the outbox with
}

// NewRelay returns a relay from the outbox in db to the streams on rdb.
func NewRelay(db *pgxpool.Pool, rdb *redis.Client, opts Options) (*Relay, error) {
	if opts.RedeliverAfter <= 0 {
		opts.RedeliverAfter = DefaultRedeliverAfter
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	wm := quietLogger(opts.Logger)
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, DefaultMaxlen: streamMaxLen}, wm)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	r := &Relay{db: db, rdb: rdb, opts: opts, logger: opts.Logger, wm: wm}
	r.pub = counting{pub, opts.Prefix, opts.Metrics, opts.Tracing}
	return r, nil
}

// quietLogger is watermill's logging through logger, its info and debug
// lines dropped: a router logs every start and stop of its handlers.
func quietLogger(logger *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{
		slog.LevelInfo:  slog.LevelDebug - 4,
		slog.LevelDebug: slog.LevelDebug - 4,
	})
}

// Prefix starts the name of each stream the relay publishes to.
func (r *Relay) Prefix() string { return r.opts.Prefix }

// Run relays until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.forward(ctx) })
	wg.Go(func() {
		jobs.Every(ctx, "outbox redelivery", r.opts.Interval, func(ctx context.Context) {
			if n, err := r.Redeliver(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: redeliver", "err", err)
			} else if n > 0 {
				r.logger.InfoContext(ctx, "outbox: published again events a consumer had not recorded", "count", n)
			}
			if err := r.measureLag(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: lag", "err", err)
			}
			if n, err := r.failedCount(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: failed events", "err", err)
			} else if err == nil {
				r.opts.Metrics.failed(n)
			}
		})
	})
	wg.Go(func() {
		jobs.Every(ctx, "outbox retention", time.Hour, func(ctx context.Context) {
			if err := r.Trim(ctx); err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: retention", "err", err)
			}
		})
	})
	wg.Wait()
}

// forward runs watermill's forwarder from the outbox table to the
// streams, starting it again after it stopped, until ctx ends.
func (r *Relay) forward(ctx context.Context) {
	for ctx.Err() == nil {
		if err := r.forwardOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger.WarnContext(ctx, "outbox: relay stopped; starting again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (r *Relay) forwardOnce(ctx context.Context) error {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(r.db), wsql.SubscriberConfig{
		ConsumerGroup:  relayGroup,
		SchemaAdapter:  r.schema,
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:   pollInterval,
		ResendInterval: 500 * time.Millisecond,
		RetryInterval:  time.Second,
	}, r.wm)
	if err != nil {
		return err
	}
	defer sub.Close() //nolint:errcheck // closing a subscriber that stopped
	fw, err := forwarder.NewForwarder(sub, r.pub, r.wm, forwarder.Config{ForwarderTopic: Topic, CloseTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	return fw.Run(ctx)
}

// counting publishes each event to its stream, the prefix before its
// name, and counts it.
type counting struct {
	message.Publisher
	prefix string
	m      *Metrics
	tp     trace.TracerProvider
}

func (c counting) Publish(topic string, msgs ...*message.Message) (err error) {
	if c.tp != nil {
		// A span for each event, "outbox publish", in the trace of the
		// transaction that wrote it.
		spans := make([]trace.Span, len(msgs))
		for i, m := range msgs {
			ctx := tracing.WithProvider(tracing.Extract(context.Background(), m.Metadata), c.tp)
			_, spans[i] = tracing.Start(ctx, "outbox publish", attrEvent.String(m.Metadata.Get(metaEvent)),
				attrEventID.String(m.UUID), attrStream.String(c.prefix+topic))
		}
		defer func() {
			for _, span := range spans {
				tracing.End(span, err)
			}
		}()
	}
	if err := c.Publisher.Publish(c.prefix+topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		c.m.published(m.Metadata.Get(metaEvent))
	}
	return nil
}

// The spans' attributes of an event.
const (
	attrEvent    = attribute.Key("shop.event")
	attrEventID  = attribute.Key("shop.event.id")
	attrSubject  = attribute.Key("shop.event.subject")
	attrStream   = attribute.Key("shop.event.stream")
	attrConsumer = attribute.Key("shop.consumer")
	attrOutcome  = attribute.Key("shop.consumer.outcome")
)

// The redelivery. An event is due when it is older than RedeliverAfter,
// within the retention, and one of its consumers has no inbox row for it;
// outbox_redeliveries admits one redelivery of it per pause, whichever
// replica asks, the pause doubling from RedeliverAfter up to 64 times it.
const sqlRedeliver = `WITH due AS (
		SELECT m.payload::text AS envelope, (m.payload->>'uuid')::uuid AS id
		FROM watermill_outbox m
		WHERE m.created_at < localtimestamp - $1::interval
		  AND m.created_at > localtimestamp - $2::interval
		  AND EXISTS (
			SELECT 1 FROM unnest($3::text[], $4::text[]) AS c (stream, consumer)
			WHERE c.stream = m.payload->>'destination_topic'
			  AND NOT EXISTS (SELECT 1 FROM inbox i
				WHERE i.consumer = c.consumer AND i.event_id = (m.payload->>'uuid')::uuid))
		ORDER BY m.created_at
		LIMIT $5),
	claimed AS (
		INSERT INTO outbox_redeliveries AS r (event_id, attempts, last_at)
		SELECT id, 1, now() FROM due
		ON CONFLICT (event_id) DO UPDATE SET attempts = r.attempts + 1, last_at = now()
		WHERE r.last_at < now() - $1::interval * power(2, least(r.attempts, 6))
		RETURNING event_id)
	SELECT d.envelope FROM due d JOIN claimed c ON c.event_id = d.id`

// envelope is the forwarder's envelope as the outbox row holds it
// (watermill's components/forwarder, messageEnvelope).
type envelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

// unwrap reads an outbox row's envelope: the stream it goes to, and the
// message as it was written.
func unwrap(raw string) (topic string, m *message.Message, err error) {
	var env envelope
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		return "", nil, fmt.Errorf("event envelope: %w", err)
	}
	m = message.NewMessage(env.UUID, env.Payload)
	m.Metadata = env.Metadata
	return env.DestinationTopic, m, nil
}

// Redeliver publishes again each due event (see sqlRedeliver) and
// returns how many it published.
func (r *Relay) Redeliver(ctx context.Context) (int, error) {
	var streams, consumers []string
	for name, cs := range r.opts.Consumers {
		for _, c := range cs {
			streams, consumers = append(streams, name), append(consumers, c)
		}
	}
	if len(streams) == 0 {
		return 0, nil
	}
	rows, err := r.db.Query(ctx, sqlRedeliver, r.opts.RedeliverAfter, r.opts.Retention, streams, consumers, redeliverBatch)
	if err != nil {
		return 0, fmt.Errorf("due events: %w", err)
	}
	envs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("due events: %w", err)
	}
	n := 0
	for _, raw := range envs {
		topic, m, err := unwrap(raw)
		if err != nil {
			return n, err
		}
		m.SetContext(ctx)
		// The claim is made: an event whose publish fails now waits its
		// pause and is tried again.
		if err := r.pub.Publish(topic, m); err != nil {
			return n, fmt.Errorf("publish again: %w", err)
		}
		r.opts.Metrics.redelivered(m.Metadata.Get(metaEvent))
		n++
	}
	return n, nil
}

// sqlLag is the age of the oldest event the relay has not published: the
// first row past the relay's offset, in the relay's order.
const sqlLag = `SELECT EXTRACT(EPOCH FROM localtimestamp - m.created_at)::float8
	FROM watermill_outbox m
	LEFT JOIN watermill_offsets_outbox o ON o.consumer_group = $1
	WHERE o.consumer_group IS NULL
	   OR (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked)
	ORDER BY m.transaction_id, m."offset"
	LIMIT 1`

// Lag returns the age of the oldest event not yet published (0 when
// every event is).
func (r *Relay) Lag(ctx context.Context) (time.Duration, error) {
	var secs float64
	err := r.db.QueryRow(ctx, sqlLag, relayGroup).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(max(secs, 0) * float64(time.Second)), nil
}

func (r *Relay) measureLag(ctx context.Context) error {
	lag, err := r.Lag(ctx)
	if err != nil {
		return err
	}
	r.opts.Metrics.lag(lag)
	return nil
}

// The retention: published events older than it, then the inbox rows and
// claims of events that can no longer be redelivered (an hour more, so an
// inbox row outlives its event).
const (
	sqlTrimOutbox = `DELETE FROM watermill_outbox m
		USING watermill_offsets_outbox o
		WHERE o.consumer_group = $1 AND m.created_at < localtimestamp - $2::interval
		  AND (m.transaction_id, m."offset") <= (o.last_processed_transaction_id, o.offset_acked)`
	sqlTrimInbox       = `DELETE FROM inbox WHERE processed_at < now() - $1::interval - interval '1 hour'`
	sqlTrimRedelivered = `DELETE FROM outbox_redeliveries WHERE last_at < now() - $1::interval`
)

// Trim deletes what the retention no longer needs, and the failures
// resolved since.
func (r *Relay) Trim(ctx context.Context) error {
	if _, err := r.db.Exec(ctx, sqlTrimOutbox, relayGroup, r.opts.Retention); err != nil {
		return fmt.Errorf("trim outbox: %w", err)
	}
	if _, err := r.db.Exec(ctx, sqlTrimInbox, r.opts.Retention); err != nil {
		return fmt.Errorf("trim inbox: %w", err)
	}
	if _, err := r.db.Exec(ctx, sqlTrimRedelivered, r.opts.Retention); err != nil {
		return fmt.Errorf("trim redeliveries: %w", err)
	}
	// A failure stays until its consumer has acted on the event: an
	// unresolved one is a lost effect that an operator must see.
	if _, err := r.db.Exec(ctx, sqlTrimFailed); err != nil {
		return fmt.Errorf("trim failures: %w", err)
	}
	return nil
}

// PublishAtOnce writes events into their streams, as the relay does, in
// one MULTI: consumers blocked on a stream are woken once every event is
// in it. A storm of copies of one event (the race lab's redelivery
// storm, the ablation tests) is written this way, so that no copy is
// handled before the others arrive.
func (r *Relay) PublishAtOnce(ctx context.Context, events ...Event) error {
	var wire redisstream.DefaultMarshallerUnmarshaller
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range events {
			values, err := wire.Marshal(e.Name, e.message())
			if err != nil {
				return err
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: r.opts.Prefix + e.Name, MaxLen: streamMaxLen, Approx: true, Values: values})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: publish at once: %w", err)
	}
	return nil
}

// Publish publishes events straight to their streams, now: a replay of
// events that failed for good (Replay), and, with no outbox, what a flow
// that publishes after its commit does (Deferred, the ablation test).
func (r *Relay) Publish(ctx context.Context, events ...Event) error {
	for _, e := range events {
		m := e.message()
		m.SetContext(ctx)
		if err := r.pub.Publish(e.Name, m); err != nil {
			return err
		}
	}
	return nil
}
