package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/metrics"
)

const (
	// DefaultLease outlives the 10 s request timeout with room to spare, so
	// a live owner is never taken over; a crashed one frees its key after it.
	DefaultLease = 30 * time.Second
	// MinRetention is how long keys are kept at least (DESIGN.md §3), so a
	// client retrying after a day-long outage still gets its first answer.
	MinRetention = 24 * time.Hour
	// FinishTimeout bounds the completion or release that runs after the
	// handler on a context detached from the request. The answer is sent
	// once it is stored, so this is part of every answer's time
	// (config.AnswerMargin). A completion that does not make it in time is
	// tried once more after the answer has gone out; only if that fails too
	// does the key stay claimed until its lease ends: safe, only slower for
	// a retry.
	FinishTimeout = 2 * time.Second
	// FinishRetryTimeout bounds that second try, made in the background.
	// A replica that stops waits for it (Store.Wait), so its grace period
	// must leave room for it after the drain.
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
	Logger    *slog.Logger
	Metrics   *metrics.Metrics // may be nil
	Now       func() time.Time // default time.Now; tests inject

	finishTimeout time.Duration // default FinishTimeout; a test makes every first try fail
	// claimWaits takes the try-lock out of the claim in a transaction, so
	// that a duplicate waits inside PostgreSQL on the unique index, as a
	// naive claim would: a test shows the pool stall it causes.
	claimWaits bool
}

// Store keeps idempotency keys and the responses stored under them.
type Store struct {
	db        *pgxpool.Pool
	lease     time.Duration
	retention time.Duration
	logger    *slog.Logger
	metrics   *metrics.Metrics
	counters  *counters
	now       func() time.Time

	finishTimeout time.Duration
	secondTries   sync.WaitGroup // completions and releases tried again after the answer
	claimSQL      string         // sqlClaimInTx
	reclaimSQL    string         // sqlReclaimInTx
}

// NewStore returns a store over db. Each claim, completion and release is
// one statement. Give it a pool from postgres.AsyncCommitPool so that they
// do not wait for the WAL flush: only the flow's own transaction needs a
// durable commit. If a crash loses a claim, a completion or a release, the
// key is simply claimable again (at once, or when its lease has passed), and
// the re-run is made safe by layers 1–4: the flow's own unique constraint
// returns the same result. That keeps a request that passes through this
// layer at one durable commit instead of three. Any pool works; a normal one
// only makes the bookkeeping durable, and slower.
func NewStore(db *pgxpool.Pool, opts Options) *Store {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Retention < MinRetention {
		opts.Retention = MinRetention
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
	claimSQL, reclaimSQL := sqlClaimInTx, sqlReclaimInTx
	if opts.claimWaits {
		claimSQL = strings.Replace(sqlClaimInTx, claimLock, "true", 1)
		reclaimSQL = strings.Replace(sqlReclaimInTx, claimLock, "true", 1)
	}
	return &Store{
		db:        db,
		lease:     opts.Lease,
		retention: opts.Retention,
		logger:    opts.Logger,
		metrics:   opts.Metrics,
		counters:  newCounters(opts.Metrics, opts.Logger),
		now:       opts.Now,

		finishTimeout: opts.finishTimeout,
		claimSQL:      claimSQL,
		reclaimSQL:    reclaimSQL,
	}
}

const (
	// sqlClaim inserts a claim, or takes over the claim of a request whose
	// lease has run out, in one statement: of any number of concurrent
	// requests exactly one gets a row back. A completed key, a live claim
	// and a different request under the same key are left alone.
	// created_at is returned to tell a takeover from a new key.
	sqlClaim = `
INSERT INTO idempotency_keys (principal, key, fingerprint, owner, locked_until, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (principal, key) DO UPDATE
   SET owner = EXCLUDED.owner, locked_until = EXCLUDED.locked_until
 WHERE idempotency_keys.status_code IS NULL
   AND idempotency_keys.locked_until < $6
   AND idempotency_keys.fingerprint = EXCLUDED.fingerprint
RETURNING created_at`

	sqlReadKey = `
SELECT fingerprint, locked_until, created_at, status_code, headers, body
  FROM idempotency_keys
 WHERE principal = $1 AND key = $2`

	// sqlComplete and sqlRelease are fenced by the owner token: an owner
	// whose key was taken over matches no row and changes nothing.
	sqlComplete = `
UPDATE idempotency_keys
   SET status_code = $4, headers = $5, body = $6, completed_at = $7
 WHERE principal = $1 AND key = $2 AND owner = $3 AND status_code IS NULL`

	sqlRelease = `
DELETE FROM idempotency_keys
 WHERE principal = $1 AND key = $2 AND owner = $3 AND status_code IS NULL`
)

// claim is one request's hold on a key.
type claim struct {
	principal string
	key       string
	owner     uuid.UUID
	takeover  bool      // the key was claimed before by a request whose lease ran out
	firstSeen time.Time // when the key was first submitted
	at        time.Time // when this request claimed it
}

// stored is the row found when the claim was refused.
type stored struct {
	fingerprint []byte
	lockedUntil time.Time
	firstSeen   time.Time // when the key was first submitted
	response    *response // nil while the key is claimed
}

// response is what is stored under a completed key and replayed.
type response struct {
	status  int
	headers map[string]string
	body    []byte
}

// claim tries to claim key for the request with fingerprint fp. It returns
// the claim when this request owns the key, or else the row that stopped it.
func (s *Store) claim(ctx context.Context, principal, key string, fp []byte) (*claim, *stored, error) {
	owner, err := uuid.NewRandom()
	if err != nil {
		return nil, nil, fmt.Errorf("new owner token: %w", err)
	}
	// PostgreSQL keeps microseconds; truncating makes the created_at read
	// back comparable with now.
	now := s.now().UTC().Truncate(time.Microsecond)
	// The row that refused the claim may be released or swept before it is
	// read; then the key is free and the claim is tried again (bounded).
	for range 3 {
		var createdAt time.Time
		err := s.db.QueryRow(ctx, sqlClaim, principal, key, fp, owner, now.Add(s.lease), now).Scan(&createdAt)
		if err == nil {
			return &claim{principal: principal, key: key, owner: owner, takeover: !createdAt.Equal(now),
				firstSeen: createdAt, at: now}, nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, nil, fmt.Errorf("claim idempotency key %q: %w", key, err)
		}
		prev, err := readKey(ctx, s.db, principal, key)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("idempotency key %q: %w", key, err)
		}
		return nil, prev, nil
	}
	return nil, nil, errKeyChurning
}

// errKeyChurning: each time a claim was refused, the key had been freed
// again before it could be read. Other requests with the key are claiming
// it and giving it up (their answers were not storable, say 409
// resource_busy); the key is as busy as one in progress, and a retry is
// as safe.
var errKeyChurning = errors.New("idempotency key claimed and freed again three times in a row")

func readKey(ctx context.Context, db *pgxpool.Pool, principal, key string) (*stored, error) {
	var (
		st      stored
		status  *int
		headers []byte
		body    []byte
	)
	err := db.QueryRow(ctx, sqlReadKey, principal, key).Scan(&st.fingerprint, &st.lockedUntil, &st.firstSeen, &status, &headers, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	if status != nil {
		if st.response, err = storedResponse(*status, headers, body); err != nil {
			return nil, err
		}
	}
	return &st, nil
}

// completeClaim stores the response under c's key. It reports false when the
// key is no longer c's: its lease ran out and another request took it over.
func (s *Store) completeClaim(ctx context.Context, c *claim, r *response) (bool, error) {
	headers, err := json.Marshal(r.headers)
	if err != nil {
		return false, fmt.Errorf("encode headers: %w", err)
	}
	now := s.now().UTC().Truncate(time.Microsecond)
	tag, err := s.db.Exec(ctx, sqlComplete, c.principal, c.key, c.owner, r.status, headers, r.body, now)
	if err != nil {
		return false, fmt.Errorf("complete idempotency key %q: %w", c.key, err)
	}
	return tag.RowsAffected() == 1, nil
}

// releaseClaim gives c's key up, so that a retry runs the request again. It
// reports false when the key was no longer c's.
func (s *Store) releaseClaim(ctx context.Context, c *claim) (bool, error) {
	tag, err := s.db.Exec(ctx, sqlRelease, c.principal, c.key, c.owner)
	if err != nil {
		return false, fmt.Errorf("release idempotency key %q: %w", c.key, err)
	}
	return tag.RowsAffected() == 1, nil
}
