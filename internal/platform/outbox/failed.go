package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Failed for good: an event a consumer cannot act on, whatever the
// redelivery does (a provider refused the effect with a 4xx). The
// consumer records it (GiveUp) before its delivery is acknowledged, so an
// operator finds it in outbox_failed, counted by shop_events_failed, and
// can send it again once the cause is fixed (Relay.Replay, `shop events
// replay`). Copies of the event, replayed or redelivered, are one effect
// as any copy is: the inbox and the provider's key.

// The failures: recorded, listed while unresolved, and the events to
// replay. A failure is resolved once its consumer has the event in its
// inbox.
const (
	sqlRecordFailure = `INSERT INTO outbox_failed AS f
			(consumer, event_id, event, subject, at, data, error, attempts, first_at, last_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8)
		ON CONFLICT ON CONSTRAINT outbox_failed_pkey
		DO UPDATE SET error = excluded.error, attempts = f.attempts + 1, last_at = excluded.last_at`
	sqlUnresolved = `NOT EXISTS (SELECT 1 FROM inbox i WHERE i.consumer = f.consumer AND i.event_id = f.event_id)`
	sqlFailures   = `SELECT consumer, event_id::text, event, subject, at, data, error, attempts, first_at, last_at
		FROM outbox_failed f WHERE ` + sqlUnresolved + ` ORDER BY first_at, consumer, event_id`
	sqlFailedCount = `SELECT count(*) FROM outbox_failed f WHERE ` + sqlUnresolved
	sqlTrimFailed  = `DELETE FROM outbox_failed f WHERE NOT (` + sqlUnresolved + `)`
)

// Failure is an event a consumer gave up on and has not acted on since.
type Failure struct {
	Consumer string
	Event    Event
	Error    string // the last refusal
	Attempts int    // deliveries refused
	FirstAt  time.Time
	LastAt   time.Time
}

// Execer runs a statement: a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// GiveUp records that consumer failed for good on e (cause wraps
// ErrPermanent) and returns cause, for the consumer to return. If the
// record cannot be written, it returns an error that is not permanent:
// the delivery is tried again later rather than acknowledged unrecorded.
func GiveUp(ctx context.Context, db Execer, consumer string, e Event, cause error, now time.Time) error {
	if _, err := db.Exec(ctx, sqlRecordFailure, consumer, e.ID, e.Name, e.Subject, e.At, e.Data,
		cause.Error(), now); err != nil {
		// cause is in the text, not wrapped: this error is not permanent.
		return fmt.Errorf("record failure of %s %s (%v): %w", e.Name, e.ID, cause, err)
	}
	return cause
}

// Failures returns the unresolved failures, oldest first.
func Failures(ctx context.Context, db Querier) ([]Failure, error) {
	rows, err := db.Query(ctx, sqlFailures)
	if err != nil {
		return nil, fmt.Errorf("failed events: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
		var f Failure
		err := row.Scan(&f.Consumer, &f.Event.ID, &f.Event.Name, &f.Event.Subject, &f.Event.At, &f.Event.Data,
			&f.Error, &f.Attempts, &f.FirstAt, &f.LastAt)
		f.Event.At = f.Event.At.UTC()
		return f, err
	})
}

// ErrNoFailure means no unresolved failure has the event id asked for.
var ErrNoFailure = errors.New("no unresolved failure of that event")

// Replay publishes again, to its stream, the event of each unresolved
// failure whose event id is in ids (every unresolved one when ids is
// empty), and returns the failures it replayed. Every consumer of the
// stream receives the copy; one that acted on the event already skips it
// (its inbox). The failure stays listed until its consumer records the
// event.
func (r *Relay) Replay(ctx context.Context, ids ...string) ([]Failure, error) {
	all, err := Failures(ctx, r.db)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var replayed []Failure
	published := map[string]bool{} // an event two consumers gave up on is published once
	for _, f := range all {
		if len(ids) > 0 && !want[f.Event.ID] {
			continue
		}
		delete(want, f.Event.ID)
		replayed = append(replayed, f)
		if published[f.Event.ID] {
			continue
		}
		if err := r.Publish(ctx, f.Event); err != nil {
			return replayed, fmt.Errorf("replay %s %s: %w", f.Event.Name, f.Event.ID, err)
		}
		published[f.Event.ID] = true
	}
	for id := range want {
		return replayed, fmt.Errorf("event %s: %w", id, ErrNoFailure)
	}
	return replayed, nil
}

// failedCount is how many failures are unresolved.
func (r *Relay) failedCount(ctx context.Context) (int, error) {
	var n int
	err := r.db.QueryRow(ctx, sqlFailedCount).Scan(&n)
	return n, err
}
