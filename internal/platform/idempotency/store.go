package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/keyscheme"
	"github.com/shop-example/shop/internal/platform/metrics"
)

const (
	// DefaultLease outlives the 10 s request timeout with room to spare, so
	// a live owner is never taken over; a crashed one frees its key after it.
	DefaultLease = 30 * time.Second
	// MinRetention is how long keys are kept at least (DESIGN.md §3), so a
	// client retrying after a day-long outage still gets its first answer.
	MinRetention = 24 * time.Hour
	// FinishTimeout bounds each statement Atomic runs on the store's pool
	// after the handler, on a context detached from the request: storing
	// an answer the flow did not store in its transaction (a refusal), and
	// releasing a claim a committed phase left. The answer is sent once it
	// returns, so this is part of every answer's time
	// (config.AnswerMargin). A refusal not stored in time is not sent: 503
	// instead, and a retry runs the flow again; a release that does not make it in
	// time is tried once more after the answer has gone out, and only if
	// that fails too does the key stay claimed until its lease ends: safe,
	// only slower for a retry.
	FinishTimeout = 2 * time.Second
	// FinishRetryTimeout bounds that second try of a release, made in the
	// background. A replica that stops waits for it (Store.Wait), so its
	// grace period must leave room for it after the drain.
	FinishRetryTimeout = 10 * time.Second
)

// Options configure a Store.
type Options struct {
	// Lease is how long a claim is held before another request with the
	// same key may take it over. Default DefaultLease.
	Lease time.Duration
	// Retention is how long keys are kept by RunSweeper. Default and
	// minimum MinRetention; tests sweep sooner by calling Sweep directly.
	Retention time.Duration
	// Scheme names the records written (package keyscheme); the zero
	// value is scheme 1, as before schemes existed.
	Scheme  keyscheme.Scheme
	Logger  *slog.Logger
	Metrics *metrics.Metrics // may be nil
	Now     func() time.Time // default time.Now; tests inject

	finishTimeout time.Duration // default FinishTimeout; a test makes every first try fail
}

// Store keeps idempotency keys and the responses stored under them.
type Store struct {
	db        *pgxpool.Pool
	lease     time.Duration
	retention time.Duration
	scheme    keyscheme.Scheme
	logger    *slog.Logger
	metrics   *metrics.Metrics
	counters  *counters
	now       func() time.Time

	finishTimeout time.Duration
	secondTries   sync.WaitGroup // releases tried again after the answer
}

// NewStore returns a store over db. The claim and the completion run in
// the flow's own transactions, on the flow's pool; what runs on db are the
// statements Atomic makes apart from the flow, each one statement of its
// own: storing an answer the flow did not store (a refusal answered
// before its transaction or after a rollback: 400 invalid_request, 409
// out_of_stock), reading the key that refused it, releasing a claim a
// committed phase left, and Sweep. Its commits decide what survives a
// crash or a failover: package idempotency, "Commits", says what a pool
// with synchronous_commit off (postgres.SecondPool) may lose.
func NewStore(db *pgxpool.Pool, opts Options) *Store {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Retention < MinRetention {
		opts.Retention = MinRetention
	}
	if opts.Scheme.Version == 0 {
		opts.Scheme = keyscheme.Scheme{Version: 1}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.finishTimeout <= 0 {
		opts.finishTimeout = FinishTimeout
	}
	return &Store{
		db:        db,
		lease:     opts.Lease,
		retention: opts.Retention,
		scheme:    opts.Scheme,
		logger:    opts.Logger,
		metrics:   opts.Metrics,
		counters:  newCounters(opts.Metrics, opts.Logger),
		now:       opts.Now,

		finishTimeout: opts.finishTimeout,
	}
}

const (
	// sqlReadKey reads the key's row under either name, in the order the
	// claim's name is found (recordName).
	sqlReadKey = `
SELECT fingerprint, created_at, status_code, headers, body, scheme
  FROM idempotency_keys
 WHERE principal = $1 AND key IN ($2, $3)
 ORDER BY ` + firstName + ` LIMIT 1`

	// sqlRelease is fenced by the owner token: an owner whose key was
	// taken over or completed meanwhile matches no row and changes
	// nothing. $2 is the record's name, as its claim found it.
	sqlRelease = `
DELETE FROM idempotency_keys
 WHERE principal = $1 AND key = $2 AND owner = $3 AND status_code IS NULL`
)

// stored is the row found when the claim was refused.
type stored struct {
	fingerprint []byte
	firstSeen   time.Time // when the key was first submitted
	response    *response // nil while the key is claimed
	scheme      int       // the scheme the row was written under
}

// response is what is stored under a completed key and replayed.
type response struct {
	status  int
	headers map[string]string
	body    []byte
}

// readKey reads the row of the key named by names: the one that refused an
// answer the middleware tried to store.
func (s *Store) readKey(ctx context.Context, principal string, names keyscheme.Names) (*stored, error) {
	var (
		st      stored
		status  *int
		headers []byte
		body    []byte
		scheme  int16
	)
	err := s.db.QueryRow(ctx, sqlReadKey, principal, names.Write, names.Other).
		Scan(&st.fingerprint, &st.firstSeen, &status, &headers, &body, &scheme)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	st.scheme = int(scheme)
	if status != nil {
		if st.response, err = storedResponse(*status, headers, body); err != nil {
			return nil, err
		}
	}
	return &st, nil
}

// release deletes the claim of owner on (principal, name), so that a retry
// runs the request again.
func (s *Store) release(ctx context.Context, principal, name string, owner uuid.UUID) error {
	if _, err := s.db.Exec(ctx, sqlRelease, principal, name, owner); err != nil {
		return fmt.Errorf("release idempotency key %q: %w", name, err)
	}
	return nil
}
