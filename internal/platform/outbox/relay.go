package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
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
	// horizon gates what the relay reads (sqlHorizon); a test sets
	// another to show what it lets through.
	horizon string

	mu sync.Mutex
	// floor is where the redelivery's scan of the table starts: the
	// transaction of the oldest event some consumer had not recorded at
	// the last pass, or the horizon then (Relay.Redeliver); "" until the
	// first pass, which reads the whole retention.
	floor string
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
	return &Relay{db: db, rdb: rdb, opts: opts, logger: opts.Logger, horizon: sqlHorizon}, nil
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

// forward publishes the outbox, a batch at a time, until ctx ends: at
// once again after a full batch, after pollInterval when it found
// nothing new, after a second when a batch failed.
func (r *Relay) forward(ctx context.Context) {
	zeroed := false
	for ctx.Err() == nil {
		var (
			n   int
			err error
		)
		if !zeroed {
			// The row every pass locks, written once.
			_, err = r.db.Exec(ctx, sqlZeroOffset, relayGroup)
			zeroed = err == nil
		}
		if err == nil {
			n, err = r.Forward(ctx)
		}
		pause := time.Duration(0)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.logger.WarnContext(ctx, "outbox: relay; trying again", "err", err)
			}
			pause = time.Second
		case n < forwardBatch:
			pause = pollInterval
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// forwardBatch bounds the events one pass of the relay publishes: one
// read of the outbox, one pipeline of XADDs, one move of the offset.
const forwardBatch = 100

// sqlZeroOffset is the relay's offsets row before its first batch: the
// row every pass locks.
const sqlZeroOffset = `INSERT INTO watermill_offsets_outbox (consumer_group, offset_acked, last_processed_transaction_id)
	VALUES ($1, 0, '0') ON CONFLICT DO NOTHING`

// Forward publishes the next batch of the outbox past the relay's offset
// and returns how many events it published. In one transaction: the
// offsets row locked (FOR UPDATE: a relay of another replica waits here,
// then reads past what this one published), the rows past it in the
// order of their transactions, only those older than every transaction
// that may still commit one (sqlForward); then every event of the batch
// in one pipeline of XADDs, and the offset moved past the last, with the
// COMMIT. A relay that fails between the publish and the COMMIT publishes
// the batch again: at least once, and the consumers' inbox makes the
// copies one effect.
func (r *Relay) Forward(ctx context.Context) (n int, err error) {
	err = pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlForward(r.horizon), relayGroup, forwardBatch)
		if err != nil {
			return fmt.Errorf("read outbox: %w", err)
		}
		var (
			offset  int64
			xid     string
			payload string
			msgs    []streamed
		)
		_, err = pgx.ForEachRow(rows, []any{&offset, &xid, &payload}, func() error {
			topic, m, err := unwrap(payload)
			msgs = append(msgs, streamed{topic: topic, m: m})
			return err
		})
		if err != nil {
			return fmt.Errorf("read outbox: %w", err)
		}
		if len(msgs) == 0 {
			return nil
		}
		if err := r.publish(ctx, false, msgs...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlMoveOffset, relayGroup, offset, xid); err != nil {
			return fmt.Errorf("move relay offset: %w", err)
		}
		n = len(msgs)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// streamed is a message and the event name it is published under.
type streamed struct {
	topic string
	m     *message.Message
}

// publish writes msgs to their streams (the prefix before each name) in
// one pipeline, in order, and counts them; atomic makes it one MULTI, so
// that a consumer blocked on a stream wakes to all of them at once. With
// Options.Tracing each event gets a span, "outbox publish", in the trace
// of the transaction that wrote it.
func (r *Relay) publish(ctx context.Context, atomic bool, msgs ...streamed) (err error) {
	if tp := r.opts.Tracing; tp != nil {
		spans := make([]trace.Span, len(msgs))
		for i, s := range msgs {
			sctx := tracing.WithProvider(tracing.Extract(context.Background(), s.m.Metadata), tp)
			_, spans[i] = tracing.Start(sctx, "outbox publish", attrEvent.String(s.m.Metadata.Get(metaEvent)),
				attrEventID.String(s.m.UUID), attrStream.String(r.opts.Prefix+s.topic))
		}
		defer func() {
			for _, span := range spans {
				tracing.End(span, err)
			}
		}()
	}
	var wire redisstream.DefaultMarshallerUnmarshaller
	queue := func(p redis.Pipeliner) error {
		for _, s := range msgs {
			values, err := wire.Marshal(s.topic, s.m)
			if err != nil {
				return err
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: r.opts.Prefix + s.topic, MaxLen: streamMaxLen, Approx: true, Values: values})
		}
		return nil
	}
	if atomic {
		_, err = r.rdb.TxPipelined(ctx, queue)
	} else {
		_, err = r.rdb.Pipelined(ctx, queue)
	}
	if err != nil {
		return fmt.Errorf("outbox: publish: %w", err)
	}
	for _, s := range msgs {
		r.opts.Metrics.published(s.m.Metadata.Get(metaEvent))
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
// within the retention, and one of its consumers has no inbox row for it
// and is not still waiting for it in the stream: it was written more than
// RedeliverAfter before the oldest entry that consumer's group has not
// acknowledged was published ($6, the group's front; queueFronts). An
// event is published after it is written, so one still queued was written
// at most that long before the front, unless the relay itself lagged by
// more (then a copy is published, as without the front). outbox_redeliveries
// admits one redelivery of it per pause, whichever replica asks, the
// pause doubling from RedeliverAfter up to 64 times it.
const sqlRedeliver = `WITH due AS (
		SELECT m.payload::text AS envelope, (m.payload->>'uuid')::uuid AS id
		FROM watermill_outbox m
		WHERE m.transaction_id >= $7::xid8
		  AND m.created_at < localtimestamp - $1::interval
		  AND m.created_at > localtimestamp - $2::interval
		  AND EXISTS (
			SELECT 1 FROM unnest($3::text[], $4::text[], $6::timestamptz[]) AS c (stream, consumer, front)
			WHERE c.stream = m.payload->>'destination_topic'
			  AND (c.front IS NULL OR m.created_at < (c.front AT TIME ZONE current_setting('TimeZone')) - $1::interval)
			  AND NOT EXISTS (SELECT 1 FROM inbox i
				WHERE i.consumer = c.consumer AND i.event_id = (m.payload->>'uuid')::uuid))
		ORDER BY m.transaction_id, m."offset"
		LIMIT $5),
	claimed AS (
		INSERT INTO outbox_redeliveries AS r (event_id, attempts, last_at)
		SELECT id, 1, now() FROM due
		ON CONFLICT (event_id) DO UPDATE SET attempts = r.attempts + 1, last_at = now()
		WHERE r.last_at < now() - $1::interval * power(2, least(r.attempts, 6))
		RETURNING event_id)
	SELECT d.envelope FROM due d JOIN claimed c ON c.event_id = d.id`

// sqlRedeliverFrom moves the redelivery's floor (Relay.floor, $1): to the
// transaction of the oldest event within the retention that one of its
// consumers ($3, $4) has not recorded, or to the horizon if that is older.
// Every event before it is recorded by all its consumers and stays so; an
// event not yet committed belongs to a transaction at or past the horizon.
// The scan starts at the last floor, in the primary key's order, and
// stops at the first such event: a pass reads what was written since,
// not the retention's whole day. sqlRedeliver reads from $7, the floor.
func sqlRedeliverFrom(horizon string) string {
	return `SELECT least(
		(SELECT m.transaction_id FROM watermill_outbox m
		 WHERE m.transaction_id >= $1::xid8
		   AND m.created_at > localtimestamp - $2::interval
		   AND EXISTS (
			SELECT 1 FROM unnest($3::text[], $4::text[]) AS c (stream, consumer)
			WHERE c.stream = m.payload->>'destination_topic'
			  AND NOT EXISTS (SELECT 1 FROM inbox i
				WHERE i.consumer = c.consumer AND i.event_id = (m.payload->>'uuid')::uuid))
		 ORDER BY m.transaction_id, m."offset"
		 LIMIT 1),
		` + horizon + `)::text`
}

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
	fronts, err := r.queueFronts(ctx, streams, consumers)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	floor := r.floor
	r.mu.Unlock()
	if floor == "" {
		floor = "0"
	}
	if err := r.db.QueryRow(ctx, sqlRedeliverFrom(r.horizon), floor, r.opts.Retention, streams, consumers).Scan(&floor); err != nil {
		return 0, fmt.Errorf("redelivery floor: %w", err)
	}
	r.mu.Lock()
	r.floor = floor
	r.mu.Unlock()
	// Planned for this floor each time (an unnamed statement): a plan
	// cached for any floor reads the retention's window by age and sorts
	// it (12 ms at 60,000 rows kept, against 0.2 ms from the floor).
	rows, err := r.db.Query(ctx, sqlRedeliver, pgx.QueryExecModeDescribeExec,
		r.opts.RedeliverAfter, r.opts.Retention, streams, consumers, redeliverBatch, fronts, floor)
	if err != nil {
		return 0, fmt.Errorf("due events: %w", err)
	}
	envs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("due events: %w", err)
	}
	msgs := make([]streamed, len(envs))
	for i, raw := range envs {
		if msgs[i].topic, msgs[i].m, err = unwrap(raw); err != nil {
			return 0, err
		}
	}
	// The claims are made: an event whose publish fails now waits its
	// pause and is tried again.
	if err := r.publish(ctx, false, msgs...); err != nil {
		return 0, fmt.Errorf("publish again: %w", err)
	}
	for _, s := range msgs {
		r.opts.Metrics.redelivered(s.m.Metadata.Get(metaEvent))
	}
	return len(msgs), nil
}

// queueFronts returns, for each stream and consumer, when the oldest entry
// of the stream that the consumer's group has not acknowledged was
// published: the oldest one delivered and pending, or else the first not
// yet delivered. An event written after it may still be waiting in the
// stream behind a busy consumer, and publishing it again would only add a
// copy to the queue, so the redelivery leaves it until the group has gone
// past. nil holds nothing back: nothing is waiting, or the stream or the
// group is gone (Redis lost them), and every event not recorded is due.
// The read past the last delivered entry is an exclusive range, "(id":
// Redis 6.2 or later.
func (r *Relay) queueFronts(ctx context.Context, streams, consumers []string) ([]*time.Time, error) {
	fronts := make([]*time.Time, len(streams))
	groupsOf := map[string][]redis.XInfoGroup{} // one XINFO per stream, whatever its consumers
	for i, name := range streams {
		stream := r.opts.Prefix + name
		groups, asked := groupsOf[stream]
		if !asked {
			var err error
			groups, err = r.rdb.XInfoGroups(ctx, stream).Result()
			if err != nil && !strings.Contains(err.Error(), "no such key") {
				return nil, fmt.Errorf("queue of %s: %w", stream, err)
			}
			groupsOf[stream] = groups // none when the stream is gone
		}
		for _, g := range groups {
			if g.Name != consumers[i] {
				continue
			}
			var ids []string
			if g.Pending > 0 {
				p, err := r.rdb.XPending(ctx, stream, g.Name).Result()
				if err != nil {
					return nil, fmt.Errorf("queue of %s: %w", stream, err)
				}
				ids = append(ids, p.Lower)
			}
			next, err := r.rdb.XRangeN(ctx, stream, "("+g.LastDeliveredID, "+", 1).Result()
			if err != nil {
				return nil, fmt.Errorf("queue of %s: %w", stream, err)
			}
			if len(next) > 0 {
				ids = append(ids, next[0].ID)
			}
			for _, id := range ids {
				if at, ok := entryTime(id); ok && (fronts[i] == nil || at.Before(*fronts[i])) {
					fronts[i] = &at
				}
			}
		}
	}
	return fronts, nil
}

// entryTime is when the stream entry id ("<ms>-<seq>") was added.
func entryTime(id string) (time.Time, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}

// sqlLag is the age of the oldest event the relay has not published: the
// first row past the relay's offset, in the relay's order. Like the
// relay's read (sqlForward), a row comparison with the offset:
// one step of the primary key's scan, where a join with the offsets row
// walked every row already published (22 ms with 30,000 kept, 1 ms now).
const sqlLag = `WITH o AS (
		SELECT last_processed_transaction_id AS tx, offset_acked FROM watermill_offsets_outbox
		WHERE consumer_group = $1)
	SELECT EXTRACT(EPOCH FROM localtimestamp - m.created_at)::float8
	FROM watermill_outbox m
	WHERE (m.transaction_id, m."offset") > (coalesce((SELECT tx FROM o), '0'), coalesce((SELECT offset_acked FROM o), 0))
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
	if err := r.publish(ctx, true, streamedEvents(events)...); err != nil {
		return fmt.Errorf("outbox: publish at once: %w", err)
	}
	return nil
}

// streamedEvents are events as the relay publishes them.
func streamedEvents(events []Event) []streamed {
	msgs := make([]streamed, len(events))
	for i, e := range events {
		msgs[i] = streamed{topic: e.Name, m: e.message()}
	}
	return msgs
}

// Publish publishes events straight to their streams, now: a replay of
// events that failed for good (Replay), and, with no outbox, what a flow
// that publishes after its commit does (Deferred, the ablation test).
func (r *Relay) Publish(ctx context.Context, events ...Event) error {
	return r.publish(ctx, false, streamedEvents(events)...)
}
