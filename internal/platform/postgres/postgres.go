// Package postgres opens the connection pool, runs transactions and
// translates constraint violations into domain errors.
//
// The transaction helper is the only way domain stores write: it commits or
// rolls back exactly once, turns a panic into a rollback, and returns the
// commit error instead of losing it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/tracing"
)

// IdleInTxTimeout is how long a session of the service may sit idle
// inside a transaction before the server ends it, rolling the transaction
// back and freeing its row locks. The service's transactions run database
// statements only (no Redis, no gateway call inside one), so a healthy one
// is never idle for more than a moment; one idle for seconds belongs to a
// process that stopped (paused, swapped out, its host frozen) and would
// otherwise block every request for the rows it locked for as long as it
// stays stopped. A database URL may set idle_in_transaction_session_timeout
// itself (in milliseconds, or with a unit: "10s"), which wins.
const IdleInTxTimeout = 5 * time.Second

// ConnectTimeout bounds each connection attempt to one host, unless the
// database URL sets connect_timeout itself. With a primary and its
// standby in one URL (postgres://shop@pg-a:5432,pg-b:5432/shop?target_session_attrs=read-write),
// pgx tries the hosts in order, each for this long: a host that is down
// without refusing (a dead machine, a cut network) costs at most this
// much of a request's deadline before the next one is tried.
const ConnectTimeout = 2 * time.Second

// Open connects a pool to url and checks that the server answers. Its
// sessions end a transaction left idle for IdleInTxTimeout. The service
// opens its pool with no option; opts are for tools that watch the pool.
func Open(ctx context.Context, url string, maxConns int32, opts ...Option) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	for _, opt := range opts {
		opt(cfg)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(IdleInTxTimeout.Milliseconds(), 10)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	dropOnReadOnly(cfg.ConnConfig)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.MaxConnIdleTime = 5 * time.Minute
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

// dropOnReadOnly closes a connection whose server refuses a write because
// it is read-only (25006): a primary demoted to a standby keeps the
// sessions it had, and the pool would otherwise hand them out again, each
// request failing in turn. Closed, the connection leaves the pool when it
// is released, and the next one is made to the host that accepts writes
// now (target_session_attrs=read-write). pgx's own handler, which closes
// on a FATAL error, still runs.
func dropOnReadOnly(cfg *pgx.ConnConfig) {
	next := cfg.OnPgError
	cfg.OnPgError = func(conn *pgconn.PgConn, pgErr *pgconn.PgError) bool {
		if pgErr.Code == sqlstateReadOnly {
			return false
		}
		return next == nil || next(conn, pgErr)
	}
}

// sqlstateReadOnly is read_only_sql_transaction: a write sent to a
// standby, or to a primary being demoted.
const sqlstateReadOnly = "25006"

// Option changes the configuration Open builds the pool with.
type Option func(*pgxpool.Config)

// WithTracer has pgx report to t every statement the pool's connections
// run, and every batch and connection too when t also implements
// pgx.BatchTracer and pgx.ConnectTracer (pgx checks each on its own).
// `shop bench strategies` counts round trips with it. SecondPool
// copies the pool's configuration, so a pool derived from this one
// reports to t as well.
func WithTracer(t pgx.QueryTracer) Option {
	return func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = t }
}

// Beginner starts transactions; *pgxpool.Pool satisfies it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// InTx runs fn in a transaction. It commits when fn returns nil and rolls
// back when fn returns an error or panics (the panic is re-raised after the
// rollback). The commit error is returned: a transaction whose COMMIT failed
// did not happen.
//
// fn runs once; InTx never retries. A caller that retries on serialization
// failures must be ready for fn to run more than once, so fn must not have
// effects outside the transaction.
func InTx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) (err error) {
	ctx, span := startTx(ctx)
	defer func() { endTx(span, err) }()
	tx, err := db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// InTxFirst is InTx whose BEGIN travels with the transaction's first
// statements, in one round trip (pgx.Batch.BeginTx): first queues them,
// their callbacks run, and an error of theirs (the first one) rolls the
// transaction back and is returned as it is, before fn runs. Otherwise fn
// continues the transaction, and InTxFirst commits or rolls back exactly
// as InTx does.
func InTxFirst(ctx context.Context, db *pgxpool.Pool, first func(*pgx.Batch), fn func(pgx.Tx) error) error {
	return InTxBatched(ctx, db, first, func(tx pgx.Tx) (*pgx.Batch, error) { return nil, fn(tx) })
}

// InTxBatched is InTxFirst whose COMMIT travels with the transaction's
// last statements too: fn returns them as a batch, and COMMIT is queued
// after them, so a transaction of three steps that each need the answer
// of the one before costs three round trips, not five:
//
//	BEGIN + first     one round trip; their callbacks run
//	fn                the statements that need those answers, on tx
//	last + COMMIT     one round trip: the batch fn returns
//
// An error of the last batch (the first one; a statement's, whose failure
// leaves COMMIT unrun, or the COMMIT's own) rolls back if the transaction
// is still open and is returned as it is: a caller maps its statements'
// errors itself, and a cut connection is Unavailable either way. A nil
// batch from fn commits as InTx does. Like InTx, it never retries.
func InTxBatched(ctx context.Context, db *pgxpool.Pool, first func(*pgx.Batch), fn func(pgx.Tx) (*pgx.Batch, error)) (err error) {
	ctx, span := startTx(ctx)
	defer func() { endTx(span, err) }()
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Release hands the connection back idle, or destroys it when it is
	// left inside a transaction.
	defer conn.Release()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	first(b)
	results := conn.SendBatch(ctx, b)
	tx := results.Tx()
	defer func() {
		p := recover()
		// A transaction that never began, or whose COMMIT ran, is over;
		// pgx's tx does not know of a COMMIT sent in a batch.
		if (p != nil || err != nil) && conn.Conn().PgConn().TxStatus() != 'I' {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		if p != nil {
			panic(p)
		}
	}()
	if err = results.Close(); err != nil {
		return err
	}
	last, err := fn(tx)
	if err != nil {
		return err
	}
	if last == nil {
		if err = tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}
	// A transaction that an ignored error aborted answers COMMIT with
	// ROLLBACK, and no error: that is no commit.
	last.Queue(sqlCommit).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	return tx.SendBatch(ctx, last).Close()
}

// InTxSend runs first and last as one transaction of two round trips:
// BEGIN travels with first's statements, COMMIT with last's. An error of
// first's (a statement's, or one its callbacks return) rolls back before
// last is sent, and is returned as it is; last's errors are returned as
// InTxBatched returns them. For a flow whose statements need no answer
// in Go between the two: what the second round trip holds waits only for
// the first to have succeeded.
func InTxSend(ctx context.Context, db *pgxpool.Pool, first, last *pgx.Batch) error {
	return InTxBatched(ctx, db, func(b *pgx.Batch) {
		b.QueuedQueries = append(b.QueuedQueries, first.QueuedQueries...)
	}, func(pgx.Tx) (*pgx.Batch, error) { return last, nil })
}

// startTx starts the span of one transaction (db.tx): from its BEGIN to
// its COMMIT or rollback.
func startTx(ctx context.Context) (context.Context, trace.Span) {
	return tracing.Start(ctx, "db.tx")
}

// endTx ends a transaction's span: failed when it rolled back, naming the
// constraint that refused it, if one did (layer 4).
func endTx(span trace.Span, err error) {
	if name := ConstraintViolated(err); name != "" && span.IsRecording() {
		span.SetAttributes(attribute.String("shop.constraint", name))
	}
	tracing.End(span, err)
}

// sqlCommit ends a transaction from inside a batch.
const sqlCommit = "commit"

// ConstraintViolated returns the name of the constraint err violated, or ""
// when err is not a unique, check, foreign-key or exclusion violation.
// Stores map these names to domain errors; a name is stable where a message
// is not.
func ConstraintViolated(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch pgErr.Code {
	case "23505", "23514", "23503", "23P01":
		return pgErr.ConstraintName
	}
	return ""
}

// SQLState returns the SQLSTATE code of err, or "" if err is not from the server.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Unavailable reports whether err means the database cannot serve now,
// rather than that the request or the code is wrong: the server could not
// be reached (refused, unreachable, a failed handshake), it has no room
// (53300 too many connections), it is shutting down or starting up
// (57P01–57P03), it ended this session (25P03: the session sat idle in a
// transaction past IdleInTxTimeout, so its process was stopped and the
// transaction rolled back; 57P05: idle past idle_session_timeout), it is
// read-only (25006: a standby, or a primary being demoted, during a
// failover), or the connection broke (class 08). The same request may
// succeed later, so the HTTP edge answers 503 with Retry-After, not 500.
// A pool that waits for a free connection until the request's deadline
// ends with context.DeadlineExceeded, which the edge already answers 503.
//
// A connection that breaks under a query, without a word from the server
// (a proxy or the network between cut it, or the host died), has no
// SQLSTATE: pgx reports the socket's error (an EOF, a reset) and then
// "conn closed" to the transaction still holding it. Those are
// unavailability too (the fault suite's row 7, harness/faults).
func Unavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	switch code := SQLState(err); {
	case strings.HasPrefix(code, "08"):
		return true
	case code == "53300", code == "57P01", code == "57P02", code == "57P03",
		code == "25P03", code == "57P05", code == sqlstateReadOnly:
		return true
	}
	return false
}

// SecondPool returns a second pool on pool's database, configured as pool
// is, of at most maxConns connections: statements that must not wait
// behind the flows for a connection (the idempotency store's) get their
// own. With asyncCommit its sessions run with synchronous_commit off: a
// commit returns before its WAL reaches disk, or a synchronous standby,
// and a crash or a failover may lose it. The commit is still atomic and
// at once visible to every other session. The caller must Close it.
func SecondPool(ctx context.Context, pool *pgxpool.Pool, maxConns int32, asyncCommit bool) (*pgxpool.Pool, error) {
	cfg := pool.Config() // a copy
	if asyncCommit {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	second, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open second pool: %w", err)
	}
	return second, nil
}

// Constraint is one refusal of the schema that a flow leans on (layer 4):
// a unique or check constraint, or a unique index where the rule is
// partial (WHERE …). Each flow lists its own, in one catalogue
// (orders.Constraints, …), which its store, the race lab's bare schema
// and the ablation tests all read.
type Constraint struct {
	Table string
	Name  string
	Index bool // a unique index, not a table constraint
}

// Drop is the statement that takes the constraint out of a schema.
func (c Constraint) Drop() string {
	if c.Index {
		return "DROP INDEX " + c.Name
	}
	return "ALTER TABLE " + c.Table + " DROP CONSTRAINT " + c.Name
}

// DropIfExists is Drop that leaves a schema without it as it is.
func (c Constraint) DropIfExists() string {
	if c.Index {
		return "DROP INDEX IF EXISTS " + c.Name
	}
	return "ALTER TABLE " + c.Table + " DROP CONSTRAINT IF EXISTS " + c.Name
}

// Lookup returns the constraint of cs named name.
func Lookup(cs []Constraint, name string) (Constraint, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c, true
		}
	}
	return Constraint{}, false
}
